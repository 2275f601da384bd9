/* test_topo.c — the node map of shim/topo/topo.h from gathered node keys:
 * node indices in order of first appearance, this rank's place on its node,
 * even and uneven nodes, ranks that are not node-contiguous (ncclCommSplit),
 * a key that did not arrive, the description, and the key rule (NCCL_HOSTID
 * alone, else host name and boot id; always positive).
 *
 * Must not: depend on the machine's host name beyond the key being stable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "topo.h"

static nsc_topo build(const int64_t *keys, int n, int rank) {
  nsc_topo t;
  int *node = malloc((size_t)n * sizeof *node);
  assert_non_null(node);
  assert_int_equal(nsc_topo_build(&t, keys, n, rank, node), 0);
  return t;
}

static void contiguous_even(void **state) {
  (void)state;
  const int64_t k[8] = {7, 7, 7, 7, 9, 9, 9, 9};
  nsc_topo t = build(k, 8, 5);
  assert_int_equal(t.nnodes, 2);
  int want[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  assert_memory_equal(t.node, want, sizeof want);
  assert_int_equal(t.local_rank, 1);
  assert_int_equal(t.local_size, 4);
  assert_int_equal(t.min_local, 4);
  assert_int_equal(t.max_local, 4);
  assert_true(t.contiguous);
  char d[96];
  nsc_topo_describe(&t, d, sizeof d);
  assert_string_equal(d, "2 nodes x 4 ranks");
  nsc_topo_free(&t);
}

static void strided_split(void **state) { /* ncclCommSplit by rank % 2 of 2 nodes x 2: ranks alternate nodes */
  (void)state;
  const int64_t k[6] = {3, 5, 3, 5, 3, 5};
  nsc_topo t = build(k, 6, 4);
  int want[6] = {0, 1, 0, 1, 0, 1};
  assert_memory_equal(t.node, want, sizeof want);
  assert_int_equal(t.local_rank, 2);
  assert_int_equal(t.local_size, 3);
  assert_false(t.contiguous);
  char d[96];
  nsc_topo_describe(&t, d, sizeof d);
  assert_string_equal(d, "2 nodes x 3 ranks (not node-contiguous)");
  nsc_topo_free(&t);
}

static void uneven(void **state) {
  (void)state;
  const int64_t k[5] = {11, 12, 12, 13, 13};
  nsc_topo t = build(k, 5, 0);
  assert_int_equal(t.nnodes, 3);
  assert_int_equal(t.min_local, 1);
  assert_int_equal(t.max_local, 2);
  assert_int_equal(t.local_size, 1);
  char d[96];
  nsc_topo_describe(&t, d, sizeof d);
  assert_string_equal(d, "3 nodes of 1..2 ranks (uneven)");
  nsc_topo_free(&t);
}

static void one_node_and_alone(void **state) {
  (void)state;
  const int64_t one[3] = {4, 4, 4}, alone[3] = {1, 2, 3};
  char d[96];
  nsc_topo t = build(one, 3, 2);
  nsc_topo_describe(&t, d, sizeof d);
  assert_string_equal(d, "1 node");
  assert_int_equal(t.local_rank, 2);
  nsc_topo_free(&t);
  t = build(alone, 3, 1);
  nsc_topo_describe(&t, d, sizeof d);
  assert_string_equal(d, "3 nodes x 1 rank");
  assert_int_equal(t.local_rank, 0);
  nsc_topo_free(&t);
}

static void key_missing(void **state) { /* a slot left at 0, or poison (-1) */
  (void)state;
  const int64_t zero[3] = {4, 0, 4}, poison[2] = {-1, -1};
  nsc_topo t;
  int node[3];
  assert_int_equal(nsc_topo_build(&t, zero, 3, 0, node), -1);
  assert_int_equal(nsc_topo_build(&t, poison, 2, 0, node), -1);
}

static void key_rule(void **state) {
  (void)state;
  unsetenv("NCCL_HOSTID");
  int64_t a = nsc_topo_node_key(), b = nsc_topo_node_key();
  char h[256];
  int from_id = nsc_topo_host(h, sizeof h);
  assert_true(a > 0 && a < (INT64_C(1) << 62));
  assert_int_equal(a, b);
  assert_false(from_id);
  setenv("NCCL_HOSTID", "rack3-node7", 1);
  int64_t c = nsc_topo_node_key();
  from_id = nsc_topo_host(h, sizeof h);
  assert_true(from_id);
  assert_string_equal(h, "rack3-node7");
  assert_true(c > 0 && c != a);
  setenv("NCCL_HOSTID", "rack3-node8", 1);
  assert_int_not_equal(nsc_topo_node_key(), c);
  setenv("NCCL_HOSTID", "rack3-node7", 1);
  assert_int_equal(nsc_topo_node_key(), c); /* the id alone: the same on any host */
  unsetenv("NCCL_HOSTID");
  assert_int_equal(nsc_topo_node_key(), a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(contiguous_even), cmocka_unit_test(strided_split), cmocka_unit_test(uneven),
      cmocka_unit_test(one_node_and_alone), cmocka_unit_test(key_missing), cmocka_unit_test(key_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* perf_selftest.c — cmocka tests of allreduce_perf's host-side logic: the
 * fp16/bf16 codec, the claim that exact-mode inputs reduce exactly in every
 * datatype whatever the order (and, for float, through an fp16 or bf16 wire),
 * the bounds of random mode, that the checker does fail, and the parser.
 *
 * Reductions are simulated here by rounding every partial result to the type
 * (perf_store + perf_load), in forward and reverse rank order.
 *
 * Must not: need MPI, NCCL or a GPU at run time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "perf_args.h"
#include "perf_data.h"

static const perf_type_t *type_named(const char *n) { return &perf_types[perf_type_index(n)]; }
static const perf_op_t *op_named(const char *n) { return &perf_ops[perf_op_index(n)]; }

static double round_to(const perf_type_t *t, double v) {
  unsigned char b[8];
  perf_store(t, b, v);
  return perf_load(t, b);
}

static uint16_t bits16(const perf_type_t *t, double v) {
  uint16_t h;
  perf_store(t, &h, v);
  return h;
}

static void test_codec(void **state) {
  (void)state;
  const perf_type_t *h = type_named("half"), *bf = type_named("bfloat16");
  assert_int_equal(bits16(h, 1.0), 0x3C00);
  assert_int_equal(bits16(h, -2.0), 0xC000);
  assert_int_equal(bits16(h, 65504.0), 0x7BFF);
  assert_int_equal(bits16(h, 65520.0), 0x7C00);             /* rounds past the max: Inf */
  assert_int_equal(bits16(h, 0x1p-24), 0x0001);             /* smallest subnormal */
  assert_int_equal(bits16(h, 0x1p-25), 0x0000);             /* tie to even: 0 */
  assert_int_equal(bits16(h, 1.0 + 0x1p-11), 0x3C00);       /* tie to even: down */
  assert_int_equal(bits16(h, 1.0 + 3 * 0x1p-11), 0x3C02);   /* tie to even: up */
  assert_int_equal(bits16(h, 2047.5), 0x6800);              /* rounds up into the next binade */
  assert_int_equal(bits16(h, -0.0), 0x8000);
  assert_true(isnan(round_to(h, NAN)));
  assert_int_equal(bits16(bf, 1.0), 0x3F80);
  assert_int_equal(bits16(bf, 1.0 + 0x1p-8), 0x3F80);
  assert_int_equal(bits16(bf, 1.0 + 3 * 0x1p-8), 0x3F82);
  assert_int_equal(bits16(bf, 0x1p-133), 0x0001);           /* bf16 smallest subnormal */
  assert_true(isinf(round_to(bf, 0x1p128)));
  for (int i = -30000; i <= 30000; i += 7) {                /* round trip of every sampled half */
    uint16_t x = (uint16_t)i;
    if (((x >> 10) & 0x1F) == 0x1F) continue;
    assert_int_equal(bits16(h, perf_load(h, &x)), x);
  }
}

/* Reduces n ranks' element i in the order given, rounding each partial result
 * to `acc` (the datatype, or the wire type); avg as NCCL does it for floating
 * types (each input times a rounded 1/n) or integers (sum, then divide). */
static double simulate(const perf_type_t *t, const perf_type_t *acc, const perf_op_t *op,
                       double *const *in, int n, size_t i, int reverse) {
  double r = 0, inv = round_to(acc, 1.0 / n);
  for (int k = 0; k < n; k++) {
    int rank = reverse ? n - 1 - k : k;
    double v = round_to(acc, in[rank][i]);
    if (op->nccl == ncclAvg && t->kind == PERF_FLOAT) v = round_to(acc, v * inv);
    if (k == 0) { r = v; continue; }
    switch (op->nccl) {
    case ncclProd: r = round_to(acc, r * v); break;
    case ncclMax: r = v > r ? v : r; break;
    case ncclMin: r = v < r ? v : r; break;
    default: r = round_to(acc, r + v); break;
    }
  }
  if (op->nccl == ncclAvg && t->kind != PERF_FLOAT) r = trunc(r / n);
  return round_to(t, r);
}

enum { COUNT = 4096, MAXR = 32 };

/* Inputs of every rank as doubles, and the simulated result stored in type t. */
static void run_sim(const perf_gen_t *g, const perf_type_t *acc, int reverse, void *out) {
  static double vals[MAXR][COUNT];
  static unsigned char buf[COUNT * 8];
  double *in[MAXR];
  for (int r = 0; r < g->nranks; r++) {
    perf_fill_input(g, r, buf, COUNT);
    for (size_t i = 0; i < COUNT; i++) vals[r][i] = perf_load(g->type, buf + i * g->type->size);
    in[r] = vals[r];
  }
  for (size_t i = 0; i < COUNT; i++)
    perf_store(g->type, (char *)out + i * g->type->size,
               simulate(g->type, acc, g->op, in, g->nranks, i, reverse));
}

static const int rank_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32};

static void test_exact_any_order(void **state) {
  (void)state;
  static unsigned char out[COUNT * 8];
  for (int ti = 0; ti < perf_ntypes; ti++)
    for (int oi = 0; oi < perf_nops; oi++)
      for (size_t ni = 0; ni < sizeof rank_counts / sizeof rank_counts[0]; ni++)
        for (int rev = 0; rev < 2; rev++) {
          const perf_type_t *t = &perf_types[ti];
          perf_gen_t g;
          perf_gen_init(&g, t, &perf_ops[oi], rank_counts[ni], 7 + ni, 0);
          run_sim(&g, t, rev, out);
          perf_check_t res = {0, 0};
          perf_check_result(&g, out, COUNT, t->unit, &res);
          if (res.wrong) fail_msg("%s %s n=%d rev=%d: %llu wrong", t->name, perf_ops[oi].name,
                                  rank_counts[ni], rev, (unsigned long long)res.wrong);
          if (!perf_gen_bounded(&g)) assert_true(res.max_relerr == 0);
        }
}

/* float data stay exact when the shim sends them as fp16 or bf16. */
static void test_exact_through_wire(void **state) {
  (void)state;
  static unsigned char out[COUNT * 4];
  const char *wires[] = {"half", "bfloat16"};
  for (int w = 0; w < 2; w++)
    for (size_t ni = 0; ni < sizeof rank_counts / sizeof rank_counts[0]; ni++) {
      int n = rank_counts[ni];
      const char *ops[] = {"sum", "avg"};
      for (int oi = 0; oi < (n & (n - 1) ? 1 : 2); oi++) { /* avg: exact when n is a power of two */
        perf_gen_t g;
        perf_gen_init(&g, type_named("float"), op_named(ops[oi]), n, 3, 0);
        run_sim(&g, type_named(wires[w]), 0, out);
        perf_check_t res = {0, 0};
        perf_check_result(&g, out, COUNT, type_named(wires[w])->unit, &res);
        if (res.wrong) fail_msg("float %s via %s n=%d: %llu wrong", ops[oi], wires[w], n, (unsigned long long)res.wrong);
      }
    }
}

/* Random mode: within the bound of the type the values travelled in, and
 * the fp32 bound is tight enough to see an fp16 wire. */
static void test_random_bounds(void **state) {
  (void)state;
  static unsigned char out[COUNT * 8];
  const char *types[] = {"half", "bfloat16", "float", "double"};
  for (int ti = 0; ti < 4; ti++)
    for (int oi = 0; oi < perf_nops; oi++)
      for (int n = 1; n <= 16; n *= 2) {
        const perf_type_t *t = type_named(types[ti]);
        perf_gen_t g;
        perf_gen_init(&g, t, &perf_ops[oi], n + (oi % 2), 11, 1);
        run_sim(&g, t, oi % 2, out);
        perf_check_t res = {0, 0};
        perf_check_result(&g, out, COUNT, t->unit, &res);
        if (res.wrong) fail_msg("%s %s n=%d: %llu wrong", t->name, perf_ops[oi].name, g.nranks, (unsigned long long)res.wrong);
        assert_true(res.max_relerr <= (g.nranks + 2) * t->unit);
      }
  perf_gen_t g;
  perf_gen_init(&g, type_named("float"), op_named("sum"), 4, 5, 1);
  run_sim(&g, type_named("half"), 0, out);
  perf_check_t res = {0, 0};
  perf_check_result(&g, out, COUNT, 0x1p-11, &res);
  assert_int_equal(res.wrong, 0);
  assert_true(res.max_relerr > 0x1p-24 && res.max_relerr <= 5 * 0x1p-11);
  memset(&res, 0, sizeof res);
  perf_check_result(&g, out, COUNT, 0x1p-24, &res);
  assert_true(res.wrong > COUNT / 2);
}

/* The checker fails: a corrupted element, an untouched buffer, a changed input. */
static void test_checker_fails(void **state) {
  (void)state;
  static unsigned char out[COUNT * 8];
  for (int ti = 0; ti < perf_ntypes; ti++)
    for (int random = 0; random < 2; random++) {
      const perf_type_t *t = &perf_types[ti];
      perf_gen_t g;
      perf_gen_init(&g, t, op_named("sum"), 4, 1, random);
      run_sim(&g, t, 0, out);
      perf_corrupt_one(t, out, COUNT);
      perf_check_t res = {0, 0};
      perf_check_result(&g, out, COUNT, t->unit, &res);
      if (res.wrong != 1) fail_msg("%s random=%d: corrupt gave %llu wrong", t->name, random, (unsigned long long)res.wrong);

      perf_fill_sentinel(&g, out, COUNT);
      memset(&res, 0, sizeof res);
      perf_check_result(&g, out, COUNT, t->unit, &res);
      assert_int_equal(res.wrong, COUNT);

      perf_fill_input(&g, 2, out, COUNT);
      assert_int_equal(perf_count_changed(&g, 2, out, COUNT), 0);
      perf_corrupt_one(t, out, COUNT);
      assert_int_equal(perf_count_changed(&g, 2, out, COUNT), 1);
      assert_true(perf_count_changed(&g, 3, out, COUNT) > 0); /* ranks differ */
    }
}

static int parse(const char *line, perf_opts_t *o) {
  char buf[256], *argv[32], err[4096];
  int argc = 0;
  snprintf(buf, sizeof buf, "allreduce_perf %s", line);
  for (char *tok = strtok(buf, " "); tok && argc < 31; tok = strtok(NULL, " ")) argv[argc++] = tok;
  argv[argc] = NULL;
  return perf_parse_args(argc, argv, o, err, sizeof err);
}

static void test_args(void **state) {
  (void)state;
  perf_opts_t o;
  assert_int_equal(parse("", &o), 0);
  assert_int_equal(o.min_bytes, 32u << 20);
  assert_int_equal(o.iters, 20);
  assert_int_equal(o.warmup, 5);
  assert_int_equal(o.average, 1);
  assert_string_equal(perf_types[o.types[0]].name, "float");
  assert_int_equal(parse("-b 8 -e 1.5K -f 2 -d all -o all -m 4 -n 3 -w 0 -c 0 -a 3 -J x.json -R 1", &o), 0);
  assert_int_equal(o.min_bytes, 8);
  assert_int_equal(o.max_bytes, 1536);
  assert_int_equal(o.step_factor, 2);
  assert_int_equal(o.ntypes, 10);
  assert_int_equal(o.nops, 5);
  assert_int_equal(o.agg, 4);
  assert_int_equal(o.check, 0);
  assert_int_equal(o.average, 3);
  assert_int_equal(o.random, 1);
  assert_string_equal(o.json_path, "x.json");
  assert_int_equal(parse("--minbytes 1M --maxbytes 2G --datatype bfloat16 --op avg", &o), 0);
  assert_int_equal(o.max_bytes, 2ull << 30);
  assert_string_equal(perf_types[o.types[0]].name, "bfloat16");
  assert_string_equal(perf_ops[o.ops[0]].name, "avg");
  assert_int_equal(parse("-t 1 -g 1", &o), 0);
  assert_int_equal(parse("-h", &o), 1);
  const char *bad[] = {"-t 2", "-g 4", "-b 1X", "-b -5", "-e 8 -b 16", "-n 0", "-a 4", "-z 2", "-d fp8",
                       "-o mulsum", "-c x", "-q 1", "-b", "-f 0", "-i 0 -b 8 -e 16", "-z 1 -G 2", "extra"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (parse(bad[i], &o) != -1) fail_msg("accepted '%s'", bad[i]);
  assert_true(perf_parse_size("4k") == 4096 && perf_parse_size("") < 0 && perf_parse_size("1KB") < 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_codec),
    cmocka_unit_test(test_exact_any_order),
    cmocka_unit_test(test_exact_through_wire),
    cmocka_unit_test(test_random_bounds),
    cmocka_unit_test(test_checker_fails),
    cmocka_unit_test(test_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_core.c — the shim's pure decisions without NCCL or a GPU: the order in
 * which real NCCL symbols are looked for (fake loader), and the policy that
 * says which calls are compressed, fused, accumulable or passed through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "policy.h"
#include "real.h"

/* A fake loader: which (place, name) pairs exist, and a log of lookups. */
static const char *present[8];
static int loaded_lib;
static char trail[1024];
static char lib_handle, next_handle;

static void *fake_open(const char *soname) {
  strcat(trail, "open:");
  strcat(trail, soname);
  strcat(trail, ";");
  return loaded_lib ? &lib_handle : NULL;
}

static void *fake_sym(void *h, const char *name) {
  char key[96];
  snprintf(key, sizeof key, "%s:%s", h == &lib_handle ? "lib" : "next", name);
  if (!strcmp(name, "pncclAllReduce") || !strcmp(name, "ncclAllReduce")) {
    strcat(trail, key);
    strcat(trail, ";");
  }
  for (int i = 0; present[i]; i++)
    if (!strcmp(present[i], key)) return (void *)present[i];
  return NULL;
}

static nsc_dl_ops ops = {fake_open, fake_sym, &next_handle};

static void reset(void) {
  memset(present, 0, sizeof present);
  trail[0] = '\0';
  loaded_lib = 0;
}

static void resolve_prefers_loaded_pnccl(void **state) {
  (void)state;
  reset();
  loaded_lib = 1;
  present[0] = "lib:pncclAllReduce";
  present[1] = "next:pncclAllReduce";
  present[2] = "next:ncclAllReduce";
  nsc_real_t r;
  char err[256];
  assert_int_equal(nsc_real_resolve_with(&ops, &r, err, sizeof err), 0);
  assert_ptr_equal((void *)r.AllReduce, (void *)present[0]);
  assert_non_null(strstr(r.how, "loaded libnccl.so.2"));
}

static void resolve_then_next_pnccl(void **state) {
  (void)state;
  reset();
  loaded_lib = 0; /* libnccl.so.2 not loaded under that name */
  present[0] = "next:pncclAllReduce";
  present[1] = "next:ncclAllReduce";
  nsc_real_t r;
  char err[256];
  assert_int_equal(nsc_real_resolve_with(&ops, &r, err, sizeof err), 0);
  assert_ptr_equal((void *)r.AllReduce, (void *)present[0]);
  assert_non_null(strstr(r.how, "pncclAllReduce via RTLD_NEXT"));
}

static void resolve_then_next_nccl(void **state) {
  (void)state;
  reset();
  loaded_lib = 1; /* loaded but without the profiling alias */
  present[0] = "next:ncclAllReduce";
  nsc_real_t r;
  char err[256];
  assert_int_equal(nsc_real_resolve_with(&ops, &r, err, sizeof err), 0);
  assert_ptr_equal((void *)r.AllReduce, (void *)present[0]);
  /* The order of lookups for AllReduce is exactly the documented one. */
  assert_non_null(strstr(trail, "open:libnccl.so.2;lib:pncclAllReduce;next:pncclAllReduce;next:ncclAllReduce;"));
}

static void resolve_nothing(void **state) {
  (void)state;
  reset();
  nsc_real_t r;
  char err[256];
  assert_int_equal(nsc_real_resolve_with(&ops, &r, err, sizeof err), -1);
  assert_null((void *)r.AllReduce);
  assert_non_null(strstr(err, "statically"));
}

static nsc_config cfg_with(const char *kv) {
  nsc_config c;
  char err[256];
  char *env[] = {(char *)kv, NULL};
  assert_int_equal(nsc_config_parse(kv ? env : NULL, &c, err, sizeof err), 0);
  return c;
}

/* The policy's answer (policy.h): compressible on its own (why NONE), a
 * fusable member of a group whatever its size, or neither and why. */
static int compressible(const nsc_config *c, nsc_call *call) {
  nsc_policy_ask(c, call);
  return call->pol.why == NSC_WHY_NONE;
}
static int fusable(const nsc_config *c, nsc_call *call) {
  nsc_policy_ask(c, call);
  return (call->pol.may & NSC_MAY_FUSE) != 0;
}

static void policy_which_calls(void **state) {
  (void)state;
  nsc_config c = cfg_with(NULL);
  nsc_call call = {.count = 65536 / 4, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  assert_true(compressible(&c, &call));
  call.op = ncclAvg;
  assert_true(compressible(&c, &call));
  call.count = 65536 / 4 - 1; /* threshold - 4 bytes */
  assert_false(compressible(&c, &call));
  assert_int_equal(call.pol.why, NSC_WHY_MIN_BYTES);
  call.count = 65536 / 4;
  for (int op = ncclProd; op <= ncclMin; op++) {
    call.op = (ncclRedOp_t)op;
    assert_false(compressible(&c, &call));
    assert_int_equal(call.pol.why, NSC_WHY_OP);
  }
  call.op = (ncclRedOp_t)ncclNumOps; /* a PreMulSum handle */
  assert_false(compressible(&c, &call));
  call.op = ncclSum;
  /* fp32, bf16 and fp16; MIN_BYTES in the call's own bytes (a 16-bit call
   * needs twice the elements) */
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    int half = dt == ncclBfloat16 || dt == ncclFloat16;
    call.dt = (ncclDataType_t)dt;
    call.count = 65536 / 4;
    assert_false(compressible(&c, &call) && half);
    assert_int_equal(call.pol.why, dt == ncclFloat32 ? NSC_WHY_NONE : half ? NSC_WHY_MIN_BYTES : NSC_WHY_DTYPE);
    call.count = 65536 / 2;
    assert_int_equal(compressible(&c, &call), dt == ncclFloat32 || half);
    call.count = 65536 / 2 - 1;
    assert_int_equal(compressible(&c, &call), dt == ncclFloat32);
    call.in_group = 1; /* never fused: a bucket is fp32 */
    assert_int_equal(fusable(&c, &call), dt == ncclFloat32);
    call.in_group = 0;
  }
  call.count = 65536 / 4;
  call.dt = ncclFloat32;
  call.has_buffers = 0;
  assert_false(compressible(&c, &call));
  assert_int_equal(call.pol.why, NSC_WHY_ARGS);
  call.has_buffers = 1;
  assert_false(fusable(&c, &call)); /* not in a group */
  call.in_group = 1;
  call.count = 1; /* in a group any size is fused: the threshold applies to the total */
  assert_true(fusable(&c, &call));
  assert_false(compressible(&c, &call));
  nsc_config off = cfg_with("NCCLSHIM_COMPRESS=off");
  assert_false(fusable(&off, &call));
  assert_int_equal(call.pol.why, NSC_WHY_OFF);
  nsc_config nofuse = cfg_with("NCCLSHIM_FUSE_BYTES=0");
  assert_false(fusable(&nofuse, &call));
  call.count = 1 << 20;
  assert_true(compressible(&nofuse, &call));
  call.rs = 1; /* a reduce-scatter is never fused */
  assert_false(fusable(&c, &call));
}

static void policy_accumulable(void **state) {
  (void)state;
  nsc_config k1 = cfg_with(NULL), k4 = cfg_with("NCCLSHIM_ACCUM_STEPS=4");
  nsc_call call = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  assert_false(nsc_policy_accumulable(&k1, &call));
  assert_true(nsc_policy_accumulable(&k4, &call));
  call.capturing = 1; /* a decision would be frozen into the graph */
  assert_false(nsc_policy_accumulable(&k4, &call));
  call.capturing = 0;
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    call.dt = (ncclDataType_t)dt;
    int floating = dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16;
    assert_int_equal(nsc_policy_accumulable(&k4, &call), floating);
  }
  call.dt = ncclFloat32;
  call.op = ncclMax;
  assert_false(nsc_policy_accumulable(&k4, &call));
  call.op = ncclAvg;
  assert_true(nsc_policy_accumulable(&k4, &call));
  call.count = 1; /* a barrier or a metric */
  assert_false(nsc_policy_accumulable(&k4, &call));
  call.count = 65536 / 2;
  call.dt = ncclFloat16; /* bytes, not elements, meet the threshold */
  assert_true(nsc_policy_accumulable(&k4, &call));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resolve_prefers_loaded_pnccl), cmocka_unit_test(resolve_then_next_pnccl),
      cmocka_unit_test(resolve_then_next_nccl),       cmocka_unit_test(resolve_nothing),
      cmocka_unit_test(policy_which_calls),           cmocka_unit_test(policy_accumulable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

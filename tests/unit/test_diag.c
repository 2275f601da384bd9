/* test_diag.c — the diagnosis as pure functions (shim/diag/): the step
 * detector (the accumulation learner, observe-only) on synthetic call
 * sequences, the per-step accounting on synthetic records and times, and
 * the verdict rules at and around their thresholds. Every expectation is
 * exact: which call begins which pass, each step's times in ns, each share
 * and verdict. Must not: depend on NCCL, MPI or a GPU (nccl.h for the enums). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "diag.h"
#include "diag_nvml.h"
#include "diag_policy.h"
#include "log.h"
#include "policy.h"

#define BUCKET 65536u /* floats per synthetic bucket */

static nsc_accum_el el_of(uintptr_t buf, uint64_t count, int dt) {
  nsc_accum_el e = {buf, buf, count, dt, ncclSum, count * (dt == ncclInt32 || dt == ncclFloat32 ? 4u : 2u)};
  return e;
}

/* Feed one fp32 bucket call; returns the pass it begins (-1: none). */
static long long feed(nsc_diag *d, uint64_t call, uintptr_t buf, uint64_t count) {
  nsc_accum_el e = el_of(buf, count, ncclFloat32);
  return nsc_diag_call(d, call, &e, 1, 0, 1) ? d->cur_pass : -1;
}

/* DDP: a whole-model pass (one bucket of 3 x BUCKET), then passes of the
 * buckets A, B, C. Locked after the third identical pass (call 10); passes
 * count from the whole-model one (pass 0), so call 11 begins pass 4. */
static void test_ddp_passes(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 1);
  assert_non_null(d);
  uint64_t call = 0;
  assert_int_equal(feed(d, ++call, 0x9000, 3 * BUCKET), -1);
  long long begins[32];
  uint64_t at[32];
  int nb = 0;
  for (int p = 0; p < 8; p++)
    for (int k = 0; k < 3; k++) {
      long long m = feed(d, ++call, 0x1000 + 0x1000 * (uintptr_t)k, BUCKET);
      if (m >= 0) {
        begins[nb] = m;
        at[nb++] = call;
      }
      if (call == 12) { /* efx's view: pass 4, position 1 (bucket B) */
        long long pass;
        long pos;
        nsc_diag_position(d, &pass, &pos);
        assert_int_equal(pass, 4);
        assert_int_equal(pos, 1);
        assert_int_equal(nsc_accum_pass_len(&d->learn), 3);
      }
    }
  assert_int_equal(nb, 5);
  for (int i = 0; i < nb; i++) {
    assert_int_equal(begins[i], 4 + i);
    assert_int_equal(at[i], 11 + 3 * (uint64_t)i);
  }
  assert_int_equal(d->pass_len, 3);
  assert_int_equal(d->pass_bytes, 3 * BUCKET * 4);
  assert_int_equal(d->acc_calls, 25);
  assert_int_equal(d->last_call, 25); /* the last C */
  nsc_diag_free(d);
}

/* A plain loop (no whole-model pass, no used-map) with a 1-element metric
 * after each pass: accumulation would not lock (not DDP's), the observer
 * does, its passes counting from A's first call: locked after the third
 * pass (call 11), call 13 begins pass 3. */
static void test_plain_loop_boundaries(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 0);
  uint64_t call = 0, at[8];
  long long m[8];
  int nb = 0;
  for (int p = 0; p < 6; p++) {
    for (int k = 0; k < 3; k++) {
      long long b = feed(d, ++call, 0x1000 + 0x1000 * (uintptr_t)k, BUCKET);
      if (b >= 0) {
        m[nb] = b;
        at[nb++] = call;
      }
    }
    nsc_accum_el metric = el_of(0x8000, 1, ncclFloat32);
    (void)nsc_diag_call(d, ++call, &metric, 0, 0, 1);
  }
  assert_int_equal(nb, 3);
  for (int i = 0; i < nb; i++) {
    assert_int_equal(m[i], 3 + i);
    assert_int_equal(at[i], 13 + 4 * (uint64_t)i);
  }
  nsc_diag_free(d);
}

/* Reduce-scatters (FSDP2, ZeRO) are learned too, as elements of their own:
 * a pass of RS(A), an all-reduce of A with the same count, RS(B) is three
 * buckets long (were RS(A) and AR(A) one element, A would repeat inside the
 * pass); passes count from the first, locked after the third (call 9), so
 * call 10 begins pass 3. */
static void test_reduce_scatter_passes(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 0);
  int nb = 0;
  uint64_t call = 0, at[4];
  for (int p = 0; p < 6; p++)
    for (int k = 0; k < 3; k++) {
      nsc_accum_el e = nsc_diag_el(k != 1, (void *)(uintptr_t)(k == 2 ? 0x2000 : 0x1000),
                                   (void *)(uintptr_t)(k == 2 ? 0x2000 : 0x1000), BUCKET, ncclFloat32, ncclSum,
                                   BUCKET * 4u);
      if (nsc_diag_call(d, ++call, &e, 1, 0, 1) && nb < 4) at[nb++] = call;
    }
  assert_int_equal(d->pass_len, 3);
  assert_int_equal(nb, 3);
  for (int i = 0; i < nb; i++) assert_int_equal(at[i], 10 + 3 * (uint64_t)i);
  nsc_accum_el a = nsc_diag_el(0, (void *)1, (void *)1, 8, ncclFloat32, ncclAvg, 32);
  nsc_accum_el r = nsc_diag_el(1, (void *)1, (void *)1, 8, ncclFloat32, ncclAvg, 32);
  assert_int_equal(a.op, ncclAvg);
  assert_int_equal(r.op, ncclAvg + NSC_DIAG_RS_OP);
  nsc_diag_free(d);
}

/* A bucket out of order after the lock: the observer stops at the next
 * agreement, the step in progress is dropped, learning starts again and
 * locks again three passes later. */
static void test_anomaly_relearns(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 0);
  uint64_t call = 0;
  for (int p = 0; p < 5; p++)
    for (int k = 0; k < 3; k++) (void)feed(d, ++call, 0x1000 + 0x1000 * (uintptr_t)k, BUCKET);
  assert_int_equal(d->cur_pass, 4); /* locked after pass 2 (calls 7-9), passes 3 and 4 seen */
  /* B, A, C: out of order */
  (void)feed(d, ++call, 0x2000, BUCKET);
  (void)feed(d, ++call, 0x1000, BUCKET);
  (void)feed(d, ++call, 0x3000, BUCKET);
  assert_int_equal(d->relearns, 1);
  assert_int_equal(d->cur_pass, -1);
  assert_true(strstr(d->why_off, "did not come where expected") != NULL);
  int nb = 0;
  long long first = -1;
  for (int p = 0; p < 5; p++)
    for (int k = 0; k < 3; k++) {
      long long b = feed(d, ++call, 0x1000 + 0x1000 * (uintptr_t)k, BUCKET);
      if (b >= 0 && !nb++) first = b;
    }
  assert_int_equal(nb, 2);     /* locked again after the third new pass */
  assert_int_equal(first, 3);
  nsc_diag_free(d);
}

/* Fresh buffers every call: nothing repeats, no boundary, ever. */
static void test_no_pass(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 0);
  for (uint64_t c = 1; c <= 200; c++) assert_int_equal(feed(d, c, 0x100000 + 0x1000 * (uintptr_t)c, BUCKET), -1);
  assert_int_equal(d->pass_len, 0);
  assert_int_equal(d->relearns, 0);
  /* NSC_ACC_LEARN_MAX calls without a pass (the next one ends learning): learning starts again, at most
   * NSC_DIAG_RELEARN times, then the observer stays off; calls after that are not counted */
  for (uint64_t c = 201; c <= (uint64_t)(NSC_DIAG_RELEARN + 1) * (NSC_ACC_LEARN_MAX + 1) + 7; c++)
    (void)feed(d, c, 0x100000 + 0x1000 * (uintptr_t)c, BUCKET);
  assert_int_equal(d->relearns, NSC_DIAG_RELEARN);
  assert_int_equal(d->learn.mode, NSC_ACC_OFF);
  assert_true(strstr(d->why_off, "no backward pass learned in 4096 accumulable all-reduces") != NULL);
  nsc_diag_tot t = d->tot;
  nsc_diag_ctx ctx = {.compress_off = 0, .accum_steps = 1, .learned = 0, .why_off = d->why_off,
                      .acc_calls = d->acc_calls};
  nsc_diag_result o;
  nsc_diag_judge(&t, &ctx, &o);
  assert_string_equal(o.verdict, "unknown");
  assert_true(strstr(o.reason, "no repeating backward pass was learned from this communicator's 20485 accumulable "
                               "call(s): no backward pass learned in 4096") != NULL);
  assert_true(o.exposed_comm_share < 0 && o.input_share < 0 && o.compute_share < 0);
  nsc_diag_free(d);
}

/* Accounting on the host backend: boundaries at t = 1000, 2000, 3000 µs
 * (in ns) with thread CPU/run-queue readings; records with known intervals. */
static nsc_rec rec_at(uint64_t host_ns) {
  nsc_rec r;
  memset(&r, 0, sizeof r);
  r.host_ns = host_ns;
  r.action = NSC_ACT_PASS;
  return r;
}

/* A record as the log tells it to the diagnosis (log_rec.c, diag_rec). */
static void tell(nsc_diag *d, const nsc_rec *r, int64_t pass, int last, uint64_t dur, int timed, int gpu, int64_t busy) {
  nsc_diag_in in = {pass, last, r->host_ns, dur, timed, gpu, r->untimed == NSC_UNTIMED_CAPTURE,
                    r->action == NSC_ACT_SKIP, busy};
  nsc_diag_rec(d, &in);
}

static void boundary(nsc_diag *d, long long pass, uint64_t call, uint64_t t, int64_t cpu, int64_t runq) {
  d->cur_pass = pass;
  d->bnd[pass % NSC_DIAG_BND] = (nsc_diag_bnd){.pass = pass, .call = call, .cpu_ns = -1, .runq_ns = -1};
  nsc_diag_boundary(d, t, t + 5000000, cpu, runq, 7);
}

static void test_host_accounting(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(2, 1);
  /* pass 4: [1000000, 2000000): collectives [1000000,1100000) and
   * [1050000,1250000) (overlapping: union 250000), [1600000,1700000);
   * inside them the thread used 300000 of CPU + run queue */
  boundary(d, 4, 11, 1000000, 10000000, 2000000);
  nsc_rec r = rec_at(1000000);
  tell(d, &r, 4, 0, 100000, 1, 0, 100000);
  r = rec_at(1050000);
  tell(d, &r, 4, 0, 200000, 1, 0, 150000);
  r = rec_at(1600000);
  tell(d, &r, 4, 1, 100000, 1, 0, 50000);
  /* pass 5 begins at 2000000: CPU +400000, run queue +200000 over pass 4 */
  boundary(d, 5, 14, 2000000, 10400000, 2200000);
  r = rec_at(2000000);
  tell(d, &r, 5, 0, 500000, 1, 0, 0);
  r = rec_at(2600000); /* a captured record: pass 5 is not counted */
  r.untimed = NSC_UNTIMED_CAPTURE;
  tell(d, &r, 5, 0, 0, 0, 0, -1);
  boundary(d, 6, 17, 3000000, 10500000, 2200000);
  r = rec_at(3000000);
  tell(d, &r, 6, 0, 10, 1, 0, -1);
  nsc_diag_step s[4];
  assert_int_equal(nsc_diag_take(d, s, 4), 2);
  assert_int_equal(s[0].pass, 4);
  assert_int_equal(s[0].first_call, 11);
  assert_int_equal(s[0].start_ns, 1000000);
  assert_int_equal(s[0].wall_start_ns, 6000000);
  assert_int_equal(s[0].wall_ns, 1000000);
  assert_int_equal(s[0].records, 3);
  assert_int_equal(s[0].inflight_ns, 350000);
  assert_int_equal(s[0].exposed_ns, 350000);
  assert_int_equal(s[0].max_gap_ns, 350000); /* 1250000 -> 1600000 (the tail is 300000) */
  assert_int_equal(s[0].cpu_ns, 400000);
  assert_int_equal(s[0].runq_ns, 200000);
  assert_int_equal(s[0].coll_busy_ns, 300000);
  assert_int_equal(s[0].busy_ns, 300000); /* 400000 + 200000 - 300000, below 1000000 - 350000 */
  assert_int_equal(s[0].src, NSC_DIAG_SRC_CPU);
  assert_int_equal(s[1].pass, 5);
  assert_int_equal(s[1].captured, 1);
  assert_int_equal(s[1].untimed, 1);
  assert_int_equal(s[1].inflight_ns, 500000);
  assert_int_equal(s[1].busy_ns, 100000);
  assert_int_equal(d->tot.steps, 1);
  assert_int_equal(d->tot.steps_captured, 1);
  assert_int_equal(d->tot.steps_untimed, 0);
  assert_int_equal(d->tot.wall_ns, 1000000);
  assert_int_equal(d->tot.exposed_ns, 350000);
  assert_int_equal(d->tot.busy_ns, 300000);
  /* the cap: busy never exceeds the time with no collective in flight */
  nsc_diag_step c = {.wall_ns = 1000, .inflight_ns = 600, .cpu_ns = 900, .runq_ns = 100, .coll_busy_ns = 50};
  assert_int_equal(nsc_diag_host_busy(&c), 400);
  c.cpu_ns = -1;
  assert_int_equal(nsc_diag_host_busy(&c), -1);
  /* the learner stopping (a record of no pass) drops the open step */
  r = rec_at(3100000);
  tell(d, &r, -1, 0, 10, 1, 0, -1);
  assert_int_equal(d->tot.steps_broken, 1);
  nsc_diag_free(d);
}

/* GPU: the sum of device times (capped), exposed = the last bucket's. */
static void test_gpu_accounting(void **state) {
  (void)state;
  nsc_diag *d = nsc_diag_new(1, 0);
  boundary(d, 3, 9, 1000000, -1, -1);
  nsc_rec r = rec_at(1000000);
  tell(d, &r, 3, 0, 200000, 1, 1, -1);
  r = rec_at(1100000);
  tell(d, &r, 3, 1, 300000, 1, 1, -1);
  boundary(d, 4, 12, 2000000, -1, -1);
  r = rec_at(2000000);
  tell(d, &r, 4, 0, 1, 1, 1, -1);
  assert_int_equal(d->tot.steps, 1);
  assert_int_equal(d->tot.inflight_ns, 500000);
  assert_int_equal(d->tot.exposed_ns, 300000);
  assert_int_equal(d->tot.busy_steps, 0); /* no NVML here: busy unknown */
  assert_int_equal(d->tot.gpu, 1);
  nsc_diag_ctx ctx = {.accum_steps = 1, .learned = 1, .why_off = ""};
  nsc_diag_result o;
  nsc_diag_tot t = d->tot;
  t.steps = 3;
  t.wall_ns = 3000000;
  t.exposed_ns = 1200000; /* 0.40: communication-bound even without a busy source */
  nsc_diag_judge(&t, &ctx, &o);
  assert_string_equal(o.verdict, "communication-bound");
  assert_true(o.exposed_comm_share == 0.4);
  assert_true(o.input_share < 0 && o.compute_share < 0);
  t.exposed_ns = 1199999;
  nsc_diag_judge(&t, &ctx, &o);
  assert_string_equal(o.verdict, "unknown");
  nsc_diag_free(d);
}

/* NVML's samples over a step: sample i covers (ts[i-1], ts[i]] at its
 * percent; the overlaps with [a, b] weighted by it (exact, in ns). */
static void test_nvml_map(void **state) {
  (void)state;
  const nsc_nvml_sample s[] = {{1000, 10}, {2000, 50}, {3000, 100}, {4000, 0}};
  uint64_t busy = 7;
  assert_int_equal(nsc_nvml_map(s, 4, 1500, 3500, 5000, &busy), 1);
  assert_int_equal(busy, 500 * 500 + 1000 * 1000); /* 500 us at 50 %, 1000 us at 100 %, 500 us at 0 % */
  assert_int_equal(nsc_nvml_map(s, 4, 2000, 3000, 5000, &busy), 1);
  assert_int_equal(busy, 1000000); /* exactly sample 2's span */
  assert_int_equal(nsc_nvml_map(s, 4, 1000, 4000, 5000, &busy), 1);
  assert_int_equal(busy, 1000 * 500 + 1000 * 1000 + 0); /* sample 0 is the anchor: it covers nothing */
  assert_int_equal(nsc_nvml_map(s, 4, 3500, 4500, 5000, &busy), 0); /* not reached yet */
  assert_int_equal(nsc_nvml_map(s, 4, 500, 1500, 5000, &busy), -1); /* starts before the first sample: never */
  assert_int_equal(nsc_nvml_map(s, 0, 500, 1500, 5000, &busy), 0);
  const nsc_nvml_sample g[] = {{1000, 40}, {2000, 40}, {9000, 40}};
  assert_int_equal(nsc_nvml_map(g, 3, 1200, 1800, 5000, &busy), 1);
  assert_int_equal(busy, 600 * 400);
  assert_int_equal(nsc_nvml_map(g, 3, 1500, 2500, 5000, &busy), -1); /* a 7 ms hole in the samples */
  assert_int_equal(nsc_nvml_map(g, 3, 1500, 2500, 7000, &busy), 1);
  assert_int_equal(busy, 500 * 400 + 500 * 400);
}

/* A GPU step's busy time: kernel time less the exposed communication (NCCL's
 * kernels run then), within [0, wall - exposed]. A step of a device that
 * NVML follows waits for samples; forced without any, its busy is unknown. */
static void test_gpu_busy_and_settle(void **state) {
  (void)state;
  nsc_diag_step st = {.wall_ns = 1000, .exposed_ns = 100};
  assert_int_equal(nsc_diag_gpu_busy(&st, 300), 200);
  assert_int_equal(nsc_diag_gpu_busy(&st, 50), 0);
  assert_int_equal(nsc_diag_gpu_busy(&st, 2000), 900);
  nsc_diag *d = nsc_diag_new(1, 1);
  d->cudev = 5; /* no NVML loaded in this process: no samples ever */
  boundary(d, 3, 9, 1000000, -1, -1);
  nsc_rec r = rec_at(1000000);
  tell(d, &r, 3, 1, 300000, 1, 1, -1);
  boundary(d, 4, 12, 2000000, -1, -1);
  r = rec_at(2000000);
  tell(d, &r, 4, 0, 1, 1, 1, -1);
  assert_int_equal(d->plen, 1); /* waiting, not counted yet */
  assert_int_equal(d->tot.steps, 0);
  assert_int_equal(d->slen, 0);
  nsc_diag_settle(d, 0);
  assert_int_equal(d->plen, 1);
  nsc_diag_settle(d, 1);
  assert_int_equal(d->plen, 0);
  assert_int_equal(d->tot.steps, 1);
  assert_int_equal(d->tot.exposed_ns, 300000);
  assert_int_equal(d->tot.busy_steps, 0);
  assert_int_equal(d->slen, 1);
  assert_int_equal(d->steps[d->shead].busy_ns, -1);
  assert_int_equal(d->steps[d->shead].src, NSC_DIAG_SRC_NONE);
  nsc_diag_free(d);
}

/* The verdict table with exact shares (W = 1000000 ns over 4 steps). */
static const char *judge(uint64_t exposed, uint64_t busy, int compress_off, long long K, nsc_diag_result *o) {
  nsc_diag_tot t = {.steps = 4, .wall_ns = 1000000, .exposed_ns = exposed, .busy_steps = 4, .busy_wall_ns = 1000000,
                    .busy_ns = busy, .busy_exposed_ns = exposed, .src = NSC_DIAG_SRC_CPU, .max_gap_ns = 125000};
  nsc_diag_ctx ctx = {.compress_off = compress_off, .accum_steps = K, .learned = 1, .why_off = ""};
  nsc_diag_judge(&t, &ctx, o);
  return o->verdict;
}

static void test_verdict_rules(void **state) {
  (void)state;
  nsc_diag_result o;
  /* rule 3: exposed 0.40 >= input 0.35 */
  assert_string_equal(judge(400000, 250000, 1, 1, &o), "communication-bound");
  assert_true(o.exposed_comm_share == 0.4 && o.input_share == 0.35 && o.compute_share == 0.25);
  assert_true(o.mean_step_us == 250.0);
  assert_true(strstr(o.suggest, "NCCLSHIM_COMPRESS=bf16 or fp16") != NULL);
  assert_true(strstr(o.suggest, "NCCLSHIM_ACCUM_STEPS=K") != NULL);
  assert_true(strstr(o.reason, "exposed communication 40.0%, input (device idle, no collective in flight) 35.0%, "
                               "compute 25.0% of 4 step(s), mean 0.250 ms, longest gap without a collective 0.125 ms") != NULL);
  /* compression already on, K = 4: the next steps are int8 and the fabric */
  judge(400000, 250000, 0, 4, &o);
  assert_true(strstr(o.suggest, "NCCLSHIM_COMPRESS=int8") != NULL);
  assert_null(strstr(o.suggest, "NCCLSHIM_ACCUM_STEPS=K"));
  /* the wire advice follows the setting and the gradients' type (exact table) */
  {
    static const struct {
      const char *compress;
      int grads16;
      const char *want; /* NULL: no wire advice */
    } rows[] = {
        {"off", 0, "NCCLSHIM_COMPRESS=bf16 or fp16 (half the wire bytes"},
        {"fp16", 0, "NCCLSHIM_COMPRESS=int8 (a quarter of fp32's wire bytes"},
        {"int8", 0, "NCCLSHIM_COMPRESS=int4 (an eighth of fp32's wire bytes"},
        {"fp8", 0, "NCCLSHIM_COMPRESS=int4 (an eighth"},
        {"int4", 0, NULL},
        {"off", 1, "NCCLSHIM_COMPRESS=int8 (half of the 16-bit gradients' bytes"},
        {"bf16", 1, "NCCLSHIM_COMPRESS=int8 (half of the 16-bit gradients' bytes"},
        {"int8", 1, "NCCLSHIM_COMPRESS=int4 (a quarter of the 16-bit gradients' bytes"},
        {"int4", 1, NULL},
    };
    nsc_diag_tot t = {.steps = 4, .wall_ns = 1000000, .exposed_ns = 400000, .busy_steps = 4,
                      .busy_wall_ns = 1000000, .busy_ns = 250000, .busy_exposed_ns = 400000,
                      .src = NSC_DIAG_SRC_CPU, .max_gap_ns = 125000};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      nsc_diag_ctx ctx = {.compress_off = !strcmp(rows[i].compress, "off"), .compress = rows[i].compress,
                          .grads16 = rows[i].grads16, .accum_steps = 4, .learned = 1, .why_off = ""};
      nsc_diag_judge(&t, &ctx, &o);
      assert_string_equal(o.verdict, "communication-bound");
      if (rows[i].want) assert_non_null(strstr(o.suggest, rows[i].want));
      else assert_null(strstr(o.suggest, "NCCLSHIM_COMPRESS="));
      if (rows[i].grads16) assert_null(strstr(o.suggest, "bf16 or fp16 (half the wire bytes"));
    }
  }
  /* exposed 0.399999: not communication-bound; input 0.35 < 0.40; compute 0.25: mixed, comm advice */
  assert_string_equal(judge(399999, 250000, 1, 1, &o), "mixed");
  assert_true(strstr(o.suggest, "NCCLSHIM_COMPRESS") != NULL);
  /* exposed 0.40 < input 0.45: rule 3 fails, rule 4 holds */
  assert_string_equal(judge(400000, 150000, 1, 1, &o), "input-bound");
  assert_true(o.input_share == 0.45);
  assert_true(strstr(o.suggest, "num_workers") != NULL && strstr(o.suggest, "pin_memory=True") != NULL &&
              strstr(o.suggest, "prefetch_factor") != NULL && strstr(o.suggest, "persistent_workers=True") != NULL);
  /* input exactly 0.40 */
  assert_string_equal(judge(100000, 500000, 1, 1, &o), "input-bound");
  /* compute exactly 0.60 */
  assert_string_equal(judge(100000, 600000, 1, 1, &o), "compute-bound");
  assert_true(o.compute_share == 0.6 && o.exposed_comm_share == 0.1);
  assert_true(strstr(o.suggest, "speed up the model") != NULL);
  /* compute 0.599999, input 0.300001, exposed 0.1: mixed with input advice */
  assert_string_equal(judge(100000, 599999, 1, 1, &o), "mixed");
  assert_true(strstr(o.suggest, "num_workers") != NULL);
  /* busy beyond the time without a collective is capped */
  assert_string_equal(judge(200000, 900000, 1, 1, &o), "compute-bound");
  assert_true(o.compute_share == 0.8 && o.input_share == 0.0);
  /* rule 3 (cpu-starved): run-queue time 0.25 of the step, compute 0.70; at 0.249999 compute-bound; no
   * run-queue reading: compute-bound; before communication-bound (exposed 0.40) */
  nsc_diag_tot rq = {.steps = 4, .wall_ns = 1000000, .exposed_ns = 100000, .busy_steps = 4, .busy_wall_ns = 1000000,
                     .busy_ns = 700000, .busy_exposed_ns = 100000, .src = NSC_DIAG_SRC_CPU,
                     .runq_steps = 4, .runq_wall_ns = 1000000, .runq_ns = 250000};
  nsc_diag_ctx rctx = {.compress_off = 1, .accum_steps = 1, .learned = 1, .why_off = ""};
#define VERDICT_IS(v) (nsc_diag_judge(&rq, &rctx, &o), assert_string_equal(o.verdict, (v)))
  VERDICT_IS("cpu-starved");
  assert_true(o.runqueue_share == 0.25 && o.compute_share == 0.7);
  assert_true(strstr(o.suggest, "waited for a CPU 25% of its step") != NULL && strstr(o.suggest, "make it worse") != NULL);
  assert_true(strstr(o.reason, "compute 70.0% (25.0% of it waiting for a CPU)") != NULL);
  rq.runq_ns = 249999;
  VERDICT_IS("compute-bound");
  rq.runq_steps = 0;
  VERDICT_IS("compute-bound");
  assert_true(o.runqueue_share < 0);
  rq.runq_steps = 4;
  rq.runq_ns = 500000;
  rq.exposed_ns = rq.busy_exposed_ns = 400000;
  rq.busy_ns = 500000;
  VERDICT_IS("cpu-starved");
  rq.runq_ns = 249999;
  VERDICT_IS("communication-bound");
#undef VERDICT_IS
  /* rule 1: two steps are not enough */
  nsc_diag_tot t = {.steps = 2, .wall_ns = 1000, .exposed_ns = 900, .steps_captured = 5};
  nsc_diag_ctx ctx = {.accum_steps = 1, .learned = 1, .why_off = ""};
  nsc_diag_judge(&t, &ctx, &o);
  assert_string_equal(o.verdict, "unknown");
  assert_string_equal(o.reason, "2 complete step(s), 3 needed (5 more with calls captured into a CUDA graph, not timed)");
  ctx.learned = 0; /* a communicator of small calls only (metrics, barriers) */
  nsc_diag_judge(&t, &ctx, &o);
  assert_string_equal(o.reason, "no accumulable all-reduce or reduce-scatter on this communicator (floating Sum/Avg of at least "
                                "NCCLSHIM_MIN_BYTES): no steps to find");
}

/* cpu-starved advice names DataLoader workers only where the process had
 * child processes (or where the kernel does not list them), with what it
 * knows of its cores and threads; nsc_diag_host_read reads this process. */
static void test_starved_advice(void **state) {
  (void)state;
  nsc_diag_result o;
  nsc_diag_tot rq = {.steps = 4, .wall_ns = 1000000, .exposed_ns = 100000, .busy_steps = 4, .busy_wall_ns = 1000000,
                     .busy_ns = 700000, .busy_exposed_ns = 100000, .src = NSC_DIAG_SRC_CPU,
                     .runq_steps = 4, .runq_wall_ns = 1000000, .runq_ns = 400000,
                     .cpus = 2, .threads = 9, .children = 0, .children_reads = 3};
  nsc_diag_ctx c = {.compress_off = 1, .accum_steps = 1, .learned = 1, .why_off = ""};
  nsc_diag_judge(&rq, &c, &o);
  assert_string_equal(o.verdict, "cpu-starved");
  assert_non_null(strstr(o.suggest, "this process may run on 2 cores and has 9 threads"));
  assert_non_null(strstr(o.suggest, "no child processes (no DataLoader workers)"));
  assert_null(strstr(o.suggest, "make it worse"));
  assert_null(strstr(o.suggest, "fewer workers"));
  rq.children = 3;
  nsc_diag_judge(&rq, &c, &o);
  assert_non_null(strstr(o.suggest, "it had up to 3 child processes"));
  assert_non_null(strstr(o.suggest, "more DataLoader workers would make it worse"));
  rq.children_reads = 0; /* not listed by this kernel: both said, conditionally */
  rq.cpus = rq.threads = 0;
  nsc_diag_judge(&rq, &c, &o);
  assert_non_null(strstr(o.suggest, "if it has DataLoader workers fewer of them"));
  assert_null(strstr(o.suggest, "this process may run on"));

  nsc_diag_tot t;
  memset(&t, 0, sizeof t);
  nsc_diag_host_read(&t);
  assert_true(t.cpus >= 1 && t.threads >= 1);
  if (!t.children_reads) { /* a kernel without CONFIG_PROC_CHILDREN */
    print_message("# /proc/self/task/*/children not listed here: the child count is untested\n");
    return;
  }
  int before = t.children;
  pid_t kid = fork();
  if (kid == 0) {
    pause();
    _exit(0);
  }
  assert_true(kid > 0);
  nsc_diag_host_read(&t);
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  assert_int_equal(t.children, before + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ddp_passes),        cmocka_unit_test(test_plain_loop_boundaries),
      cmocka_unit_test(test_anomaly_relearns),
      cmocka_unit_test(test_no_pass),           cmocka_unit_test(test_host_accounting),
      cmocka_unit_test(test_gpu_accounting),    cmocka_unit_test(test_verdict_rules),
      cmocka_unit_test(test_reduce_scatter_passes), cmocka_unit_test(test_nvml_map),          cmocka_unit_test(test_gpu_busy_and_settle),
      cmocka_unit_test(test_starved_advice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

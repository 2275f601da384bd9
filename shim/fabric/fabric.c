/* fabric.c — see fabric.h. The fit is exact rational arithmetic on 128-bit
 * integers: every rank that fits the same agreed samples gets the same
 * price, bit for bit. */
#include "fabric.h"

#include <stdint.h>
#include <string.h>

/* Launches skipped before sampling: a real NCCL sets up its connections at
 * a communicator's first uses, which no later launch pays. */
#define WARMUP 2

void nsc_fab_init(nsc_fab *f) {
  memset(f, 0, sizeof *f);
  f->n = -WARMUP;
}

int nsc_fab_take(nsc_fab *f, uint64_t link_bytes) {
  if (f->state != NSC_FAB_MEASURING || f->n >= NSC_FAB_SAMPLES) return -1;
  int i = f->n++;
  if (i < 0) return -1; /* warm-up */
  f->bytes[i] = link_bytes;
  f->ns[i] = -1;
  return i;
}

void nsc_fab_timed(nsc_fab *f, int i, int64_t ns) {
  if (i >= 0 && i < NSC_FAB_SAMPLES && f->state == NSC_FAB_MEASURING) f->ns[i] = ns < 0 ? -1 : ns;
}

void nsc_fab_agree_vals(const nsc_fab *f, int64_t v[NSC_FAB_VALS]) {
  int all = 1;
  for (int i = 0; i < NSC_FAB_SAMPLES; i++) {
    v[3 * i] = (int64_t)f->bytes[i];
    v[3 * i + 1] = -(int64_t)f->bytes[i];
    v[3 * i + 2] = f->ns[i] < 0 ? INT64_MIN : -f->ns[i]; /* Max over ranks: the minimum time */
    all &= f->ns[i] >= 0;
  }
  v[3 * NSC_FAB_SAMPLES] = all ? 0 : 1; /* some rank missed a sample (the summary says so) */
}

void nsc_fab_agreed(nsc_fab *f, const int64_t v[NSC_FAB_VALS], int ok) {
  if (f->state != NSC_FAB_MEASURING) return;
  f->state = NSC_FAB_FAILED;
  if (!ok) {
    f->why = "the agreement on the measured times failed";
    return;
  }
  for (int i = 0; i < NSC_FAB_SAMPLES; i++) {
    if (v[3 * i] != -v[3 * i + 1] || v[3 * i] < 0) { /* a poisoned exchange reads -1 everywhere */
      f->why = "the ranks sampled different launches";
      return;
    }
    f->bytes[i] = (uint64_t)v[3 * i];
    f->ns[i] = v[3 * i + 2] == INT64_MIN ? -1 : -v[3 * i + 2]; /* no rank timed it: dropped */
  }
  f->missed = v[3 * NSC_FAB_SAMPLES] != 0;
  if (nsc_fab_fit(f->bytes, f->ns, NSC_FAB_SAMPLES, &f->launch_ns, &f->ps_per_byte, &f->price, &f->why) == 0)
    f->state = NSC_FAB_LEARNED;
}

typedef __int128 i128;

int nsc_fab_fit(const uint64_t *bytes, const int64_t *ns, int n, uint64_t *launch_ns, uint64_t *ps_per_byte,
                uint64_t *price, const char **why) {
  /* the fastest time of each size: noise and waits only add */
  uint64_t x[NSC_FAB_SAMPLES];
  int64_t t[NSC_FAB_SAMPLES];
  int m = 0;
  for (int i = 0; i < n && i < NSC_FAB_SAMPLES; i++) {
    if (ns[i] < 0) continue;
    int j = 0;
    while (j < m && x[j] != bytes[i]) j++;
    if (j == m) x[m] = bytes[i], t[m++] = ns[i];
    else if (ns[i] < t[j]) t[j] = ns[i];
  }
  uint64_t lo = 0, hi = 0;
  for (int j = 0; j < m; j++) {
    if (!j || x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  if (m < 2 || hi < NSC_FAB_SPREAD * (lo ? lo : 1)) {
    *why = "the sampled launches were not of sizes at least 4 times apart";
    return -1;
  }
  i128 sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int j = 0; j < m; j++) {
    sx += x[j];
    sy += t[j];
    sxx += (i128)x[j] * x[j];
    sxy += (i128)x[j] * t[j];
  }
  i128 num = (i128)m * sxy - sx * sy; /* b = num / den ns per byte */
  i128 den = (i128)m * sxx - sx * sx;
  if (den <= 0 || num <= 0) {
    *why = "the measured times did not grow with the bytes";
    return -1;
  }
  i128 an = sy * den - num * sx; /* a = an / (m den) ns */
  *ps_per_byte = (uint64_t)((num * 1000 + den / 2) / den);
  *launch_ns = an > 0 ? (uint64_t)(an / ((i128)m * den)) : 0;
  *price = an > 0 ? (uint64_t)(an / ((i128)m * num)) : 0; /* a / b */
  *why = "";
  return 0;
}

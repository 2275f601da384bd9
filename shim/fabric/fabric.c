/* fabric.c — see fabric.h. The fit is exact rational arithmetic on 128-bit
 * integers: every rank that fits the same agreed samples gets the same
 * price, bit for bit. */
#include "fabric.h"

#include <stdint.h>
#include <string.h>

void nsc_fab_init(nsc_fab *f) {
  memset(f, 0, sizeof *f);
  f->n = -NSC_FAB_WARMUP; /* a real NCCL sets up its connections at a communicator's first uses */
}

/* The sizes that count (NSC_FAB_PER_SIZE calls) are NSC_FAB_SPREAD times apart. */
static int spread(const nsc_fab *f) {
  uint64_t lo = 0, hi = 0;
  int m = 0;
  for (int j = 0; j < f->nsizes; j++) {
    if (f->calls[j] < NSC_FAB_PER_SIZE) continue;
    if (!m++ || f->bytes[j] < lo) lo = f->bytes[j];
    if (f->bytes[j] > hi) hi = f->bytes[j];
  }
  return m >= 2 && hi >= NSC_FAB_SPREAD * (lo ? lo : 1);
}

int nsc_fab_due(const nsc_fab *f) {
  return f->state == NSC_FAB_MEASURING && (f->n >= NSC_FAB_MAX_CALLS || (f->n >= NSC_FAB_CALLS && spread(f)));
}

int nsc_fab_take(nsc_fab *f, uint64_t link_bytes) {
  if (f->state != NSC_FAB_MEASURING || nsc_fab_due(f)) return -1;
  if (f->n++ < 0) return -1; /* warm-up */
  for (int j = 0; j < f->nsizes; j++)
    if (f->bytes[j] == link_bytes) {
      f->calls[j]++;
      return j;
    }
  if (f->nsizes == NSC_FAB_SIZES) return -1;
  f->bytes[f->nsizes] = link_bytes;
  f->ns[f->nsizes] = -1;
  f->calls[f->nsizes] = 1;
  return f->nsizes++;
}

void nsc_fab_timed(nsc_fab *f, int i, int64_t ns) {
  if (i < 0 || i >= f->nsizes || f->state != NSC_FAB_MEASURING || ns < 0) return;
  if (f->ns[i] < 0 || ns < f->ns[i]) f->ns[i] = ns; /* noise and waits only add */
}

void nsc_fab_agree_vals(const nsc_fab *f, int64_t v[NSC_FAB_VALS]) {
  int all = 1;
  for (int i = 0; i < NSC_FAB_SIZES; i++) {
    int have = i < f->nsizes;
    v[3 * i] = have ? (int64_t)f->bytes[i] : 0;
    v[3 * i + 1] = have ? -(int64_t)f->bytes[i] : 0;
    v[3 * i + 2] = !have || f->ns[i] < 0 ? INT64_MIN : -f->ns[i]; /* Max over ranks: the minimum time */
    all &= !have || f->ns[i] >= 0;
  }
  v[3 * NSC_FAB_SIZES] = all ? 0 : 1; /* some rank missed a sample (the summary says so) */
}

void nsc_fab_agreed(nsc_fab *f, const int64_t v[NSC_FAB_VALS], int ok) {
  if (f->state != NSC_FAB_MEASURING) return;
  f->state = NSC_FAB_FAILED;
  if (!ok) {
    f->why = "the agreement on the measured times failed";
    return;
  }
  for (int i = 0; i < NSC_FAB_SIZES; i++) {
    /* every rank saw the same sizes in the same order (a poisoned exchange reads -1 everywhere) */
    if (v[3 * i] != -v[3 * i + 1] || v[3 * i] < 0 || v[3 * i] != (i < f->nsizes ? (int64_t)f->bytes[i] : 0)) {
      f->why = "the ranks sampled different launches";
      return;
    }
    if (i < f->nsizes) f->ns[i] = v[3 * i + 2] == INT64_MIN ? -1 : -v[3 * i + 2]; /* no rank timed it: dropped */
    if (i < f->nsizes && f->calls[i] < NSC_FAB_PER_SIZE) f->ns[i] = -1;      /* too few calls to count */
  }
  f->missed = v[3 * NSC_FAB_SIZES] != 0;
  if (nsc_fab_fit(f->bytes, f->ns, f->nsizes, &f->launch_ns, &f->ps_per_byte, &f->price, &f->why) == 0)
    f->state = NSC_FAB_LEARNED;
}

typedef __int128 i128;

int nsc_fab_fit(const uint64_t *bytes, const int64_t *ns, int n, uint64_t *launch_ns, uint64_t *ps_per_byte,
                uint64_t *price, const char **why) {
  /* the fastest time of each size: noise and waits only add */
  uint64_t x[NSC_FAB_SIZES];
  int64_t t[NSC_FAB_SIZES];
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (ns[i] < 0) continue;
    int j = 0;
    while (j < m && x[j] != bytes[i]) j++;
    if (j == m) {
      if (m == NSC_FAB_SIZES) continue; /* sizes past those kept */
      x[m] = bytes[i], t[m++] = ns[i];
    } else if (ns[i] < t[j]) {
      t[j] = ns[i];
    }
  }
  uint64_t lo = 0, hi = 0;
  for (int j = 0; j < m; j++) {
    if (!j || x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  if (m < 2 || hi < NSC_FAB_SPREAD * (lo ? lo : 1)) {
    *why = "the sampled launches were not of sizes at least 8 times apart";
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

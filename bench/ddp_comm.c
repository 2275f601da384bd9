/* ddp_comm.c — the communication side of bench/ddp_step: every ncclAllReduce
 * the program makes goes through ddp_allreduce, which times it (wall clock
 * around the call: the host NCCL completes a call before returning) and
 * counts it; the shim's own counters are read with dlsym'ed
 * ncclshim_get_stats when the shim is loaded. The quantizing reference casts a
 * bucket to fp16/bf16 (round to nearest even), reduces it in that type and
 * casts back: what the shim does to an fp32 Sum all-reduce.
 *
 * Must not: link the shim, or issue a collective that depends on data. */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t dt_size(ncclDataType_t dt) {
  switch (dt) {
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclFloat32: return 4;
  default: return 8;
  }
}

int ddp_comm_init(ddp_comm *c, int rank, int W, int align) {
  memset(c, 0, sizeof *c);
  c->align = align;
  c->rank = rank;
  c->W = W;
  *(void **)&c->shim_stats = dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  return 0;
}

void ddp_comm_free(ddp_comm *c) {
  if (c->comm) ncclCommDestroy(c->comm);
  free(c->wire);
  c->comm = NULL;
  c->wire = NULL;
}

ncclResult_t ddp_allreduce(ddp_comm *c, const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, int bucket) {
  if (c->align) MPI_Barrier(MPI_COMM_WORLD);
  uint64_t t0 = now_ns();
  ncclResult_t r = ncclAllReduce(send, recv, count, dt, op, c->comm, (cudaStream_t)0);
  uint64_t dt_ns = now_ns() - t0;
  c->c.ns += dt_ns;
  if (bucket) c->c.bucket_ns += dt_ns;
  c->c.calls++;
  c->c.logical_bytes += count * dt_size(dt);
  return r;
}

ncclResult_t ddp_reduce_bucket(ddp_comm *c, float *buf, size_t count, int quant, size_t quant_min) {
  if (quant == DDP_QUANT_OFF || count * sizeof(float) < quant_min)
    return ddp_allreduce(c, buf, buf, count, ncclFloat32, ncclSum, 1);
  if (count > c->wire_cap) {
    uint16_t *w = realloc(c->wire, count * sizeof *w);
    if (!w) return ncclSystemError; /* every rank sizes alike; a failure here is fatal anyway */
    c->wire = w;
    c->wire_cap = count;
  }
  int h = quant == DDP_QUANT_FP16;
  for (size_t i = 0; i < count; i++) c->wire[i] = h ? ddp_to_f16(buf[i]) : ddp_to_bf16(buf[i]);
  ncclResult_t r = ddp_allreduce(c, c->wire, c->wire, count, h ? ncclFloat16 : ncclBfloat16, ncclSum, 1);
  for (size_t i = 0; i < count; i++) buf[i] = h ? ddp_from_f16(c->wire[i]) : ddp_from_bf16(c->wire[i]);
  return r;
}

void ddp_snapshot(ddp_comm *c, ddp_counters *out) {
  if (c->shim_stats) c->shim_stats(&c->c.shim);
  *out = c->c;
}

static uint32_t bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t ddp_to_f16(float f) {
  uint32_t x = bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* NaN stays NaN */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000u) /* below 2^-14: subnormal; v * 2^24 is exact, rint is RNE */
    return (uint16_t)(sign | (uint32_t)lrintf(from_bits(ax) * 16777216.0f));
  uint32_t e = ax - 0x38000000u; /* exponent bias 127 -> 15 */
  e += 0xfff + ((e >> 13) & 1);  /* round the 13 dropped bits to nearest even */
  return (uint16_t)(sign | (e >> 13));
}

float ddp_from_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
  if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
  return from_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t ddp_to_bf16(float f) {
  uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float ddp_from_bf16(uint16_t h) { return from_bits((uint32_t)h << 16); }

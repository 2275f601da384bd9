/* tpcheck.h — what the two-phase test programs (shim_twophase.c, shim_ef.c,
 * shim_half.c)
 * share: the rank, the communicator and the wire format under test, a
 * failure counter with the first messages printed, the cross-rank bit
 * comparison, a xorshift stream for random inputs, exact inputs, and main() around a
 * command dispatcher (MPI up, one
 * communicator over MPI_COMM_WORLD, every rank's status combined). */
#ifndef NSC_TPCHECK_H
#define NSC_TPCHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"

static int rank, nranks, fails;
static ncclComm_t comm;
static const char *fmt; /* NCCLSHIM_COMPRESS, fp16 when unset */

#define EXPECT(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) {                                                 \
      if (fails++ < 10) {                                          \
        fprintf(stderr, "rank %d: ", rank);                        \
        fprintf(stderr, __VA_ARGS__);                              \
        fputc('\n', stderr);                                       \
      }                                                            \
    }                                                              \
  } while (0)

static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

/* Every rank holds the same bits: compare a hash's min and max. */
static inline int identical(const float *x, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ f2u(x[i])) * 1099511628211ull;
  uint64_t lo, hi;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* The random inputs' stream (xorshift64*): set rs_state, then draw. The
 * same on every rank, so each rank can regenerate any rank's input. */
static uint64_t rs_state;
static inline uint32_t rnd(void) {
  rs_state ^= rs_state >> 12;
  rs_state ^= rs_state << 25;
  rs_state ^= rs_state >> 27;
  return (uint32_t)((rs_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* Exact inputs: halves of small integers, at most limit() in magnitude, so
 * that sums over up to 4 ranks are exact in the wire format (int8 keeps
 * every integer <= 127 of a block; e4m3 those of 4 significant bits) and in
 * fp32, bf16 and fp16 (at most 128). int4 keeps 15 levels per block: every
 * rank gives the same value of {-1/2, 0, 1/2} for an element, so each
 * block's codes are 0 and +-4 in, and its sums over n <= 4 ranks (0 and
 * +-n/2 in a block) exact out. */
static inline int limit(void) {
  if (!strcmp(fmt, "fp16") || !strcmp(fmt, "fp16s")) return 64;
  if (!strcmp(fmt, "fp8")) return 3;
  if (!strcmp(fmt, "int4")) return 1;
  return 31;
}
static inline float exact_val(int r, size_t i) {
  int L = limit();
  if (!strcmp(fmt, "int4")) r = 0;
  return (float)((int)((i * 7 + (size_t)r * 13 + i / 5) % (size_t)(2 * L + 1)) - L) * 0.5f;
}

/* run(cmd, argc, argv) returns 0 on success; the job exits non-zero if any rank failed. */
static inline int tp_main(int argc, char **argv, const char *def, int (*run)(const char *, int, char **)) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  fmt = getenv("NCCLSHIM_COMPRESS");
  if (!fmt) fmt = "fp16";
  comm = tm_comm_world();
  int rc = run(argc > 1 ? argv[1] : def, argc, argv), any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return any;
}

#endif

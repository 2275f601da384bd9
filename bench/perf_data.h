/* perf_data.h — datatypes, reduction ops, input generation and result
 * checking for allreduce_perf, all on host memory.
 *
 * Inputs are a pure function of (seed, rank, element), so every rank can
 * regenerate every other rank's inputs and compute the exact result itself.
 *
 * Exact mode (default): small integers times powers of two, with magnitudes
 * chosen per datatype and rank count so that every partial sum, product, min,
 * max and average is exactly representable in the datatype — and, for float,
 * also in fp16 and bf16 (the shim's wire types). Results are compared bit for
 * bit, so #wrong counts elements that differ at all. One exception: float-like
 * avg with a rank count that is not a power of two, where NCCL multiplies each
 * input by a rounded 1/n; those use the bound below.
 *
 * Random mode (-R 1, floating-point types only): inputs are random values with
 * a full mantissa (exact in their type by construction), the exact result is
 * computed in double, and an element is wrong when |got - exact| exceeds
 *   sum:  (n+1) u sum_r |x_r|      avg:  (n+2) u sum_r |x_r| / n
 *   prod: (n+1) u prod_r |x_r|     min/max: 0 (always exact)
 * with u the unit roundoff of the type the values travelled in: 2^-11 fp16,
 * 2^-8 bf16, 2^-24 fp32, 2^-53 fp64 (n = ranks). The extra u in avg covers
 * the rounded 1/n. Integer types stay in exact mode under -R 1.
 *
 * Must not: call NCCL, MPI or CUDA; allocate. */
#ifndef PERF_DATA_H
#define PERF_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <nccl.h>

typedef enum { PERF_INT, PERF_UINT, PERF_FLOAT } perf_kind_t;

typedef struct {
  const char *name;       /* nccl-tests' name: "int8" ... "bfloat16" */
  ncclDataType_t nccl;
  size_t size;            /* bytes per element */
  perf_kind_t kind;
  double exact_limit;     /* largest |partial result| kept exact in exact mode */
  double unit;            /* unit roundoff (floating types), 0 for integers */
} perf_type_t;

typedef struct {
  const char *name;       /* "sum", "prod", "max", "min", "avg" */
  ncclRedOp_t nccl;
} perf_op_t;

/* In nccl-tests' order (used by -d all / -o all). */
extern const perf_type_t perf_types[];
extern const int perf_ntypes;
extern const perf_op_t perf_ops[];
extern const int perf_nops;

int perf_type_index(const char *name); /* -1 if unknown */
int perf_op_index(const char *name);   /* -1 if unknown */

/* Unit roundoff of a shim wire type name ("fp16", "bf16"); 0 if unknown. */
double perf_wire_unit(const char *wire);
/* The shim's block-scaled formats ("int8", "fp8", "fp16s"): the coefficient c of the
 * bound perf_check_block holds results to; 0 for any other name. */
double perf_wire_block_coef(const char *wire);

/* Everything that determines the data of one checked buffer. */
typedef struct {
  const perf_type_t *type;
  const perf_op_t *op;
  int nranks;
  uint64_t seed;
  int random;             /* effective: only set for floating types */
  double mag;             /* per-rank magnitude bound for exact inputs */
  size_t first;           /* results: buffer element i is element first + i of the
                           * reduction (a reduce-scatter's shard); 0 after init */
} perf_gen_t;

/* Sets up g; random is ignored for integer types. */
void perf_gen_init(perf_gen_t *g, const perf_type_t *t, const perf_op_t *op,
                   int nranks, uint64_t seed, int random);

/* Whether results are checked against a bound rather than bit for bit. */
int perf_gen_bounded(const perf_gen_t *g);

/* buf[0..count) = this rank's inputs. */
void perf_fill_input(const perf_gen_t *g, int rank, void *buf, size_t count);

/* buf[0..count) = the bitwise complement of the expected result, so a result
 * buffer that the collective leaves untouched (wholly or partly) is wrong. */
void perf_fill_sentinel(const perf_gen_t *g, void *buf, size_t count);

typedef struct {
  uint64_t wrong;         /* elements outside the check (see header) */
  /* max |got - exact| / scale, scale = sum_r |x_r| (sum), sum_r |x_r| / n
   * (avg), |exact| (prod, min, max): the quantity the bounds above limit to
   * (n+1)u, and 0 whenever results are exact. Inf/NaN results give inf. */
  double max_relerr;
} perf_check_t;

/* Checks a result buffer. unit: the roundoff the bound uses in bounded mode
 * (the type's own, or the wire type's when the shim compressed the call);
 * ignored in bitwise mode. Adds into *res. */
void perf_check_result(const perf_gen_t *g, const void *got, size_t count,
                       double unit, perf_check_t *res);

/* Number of elements of buf that differ (bitwise) from this rank's inputs:
 * an out-of-place collective must leave its send buffer alone. */
uint64_t perf_count_changed(const perf_gen_t *g, int rank, const void *buf, size_t count);

/* Debugging aid (ALLREDUCE_PERF_CORRUPT): flips a high bit of the middle
 * element, far outside any bound. No-op when count == 0. */
void perf_corrupt_one(const perf_type_t *t, void *buf, size_t count);

/* Conversions between double and a stored element (exposed for tests).
 * Storing rounds to nearest even for fp16/bf16/fp32, truncates for ints. */
double perf_load(const perf_type_t *t, const void *p);
void perf_store(const perf_type_t *t, void *p, double v);

/* Results of a block-scaled wire format with `block` elements per scale: an
 * element is wrong unless |got - exact| <= c * M + (n+1) 2^-24 * S, where S
 * is the scale of the bound above (sum |x_r|, over n for avg) and M the sum
 * over ranks of the largest |x_r| in the aligned blocks at, before and after
 * the element's (a window holding whichever block the shim's chunk layout put
 * it in; over n for avg). max_relerr stays |got - exact| / S. */
void perf_check_block(const perf_gen_t *g, const void *got, size_t count, double coef, size_t block,
                      perf_check_t *res);

#endif

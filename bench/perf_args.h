/* perf_args.h — command line of allreduce_perf: nccl-tests' all_reduce_perf
 * flags (same letters, same meanings, same defaults) plus our own -R.
 *
 * Must not: touch MPI, NCCL or CUDA; parsing is pure so every rank parses the
 * same argv to the same options, and a bad flag fails on every rank alike. */
#ifndef PERF_ARGS_H
#define PERF_ARGS_H

#include <stddef.h>

#define PERF_MAX_TYPES 16
#define PERF_MAX_OPS 8
/* Largest size accepted for -b, -e, -i: 2^50 bytes (1 PiB), far above any
 * memory, well inside size_t (a larger value used to wrap to a small one). */
#define PERF_MAX_SIZE 1125899906842624.0

typedef struct {
  size_t min_bytes, max_bytes; /* -b, -e */
  size_t step_bytes;           /* -i (used when step_factor <= 1) */
  long step_factor;            /* -f */
  int iters, warmup, agg;      /* -n, -w, -m */
  int check;                   /* -c: number of checked launches, 0 = off */
  int average;                 /* -a: 0 rank 0, 1 mean, 2 min, 3 max */
  int blocking;                /* -z */
  int graph_launches;          /* -G */
  int random;                  /* -R: random floating-point inputs */
  int ntypes, types[PERF_MAX_TYPES]; /* -d, indices into perf_types[] */
  int nops, ops[PERF_MAX_OPS];       /* -o, indices into perf_ops[] */
  const char *json_path;       /* -J, NULL = none */
} perf_opts_t;

/* Fills *o from argv. Returns 0; 1 when -h asked for usage (printed into err);
 * -1 on a bad flag or value with a message in err. Does not print. */
int perf_parse_args(int argc, char **argv, perf_opts_t *o, char *err, size_t errlen);

/* "1024", "1K", "1.5M", "2G" (powers of 1024, as nccl-tests). -1 if invalid. */
double perf_parse_size(const char *s);
/* Integer flag value in [lo, hi] (decimal, or 0x... / 0... as strtol reads
 * them); 0 on success, -1 otherwise. */
int perf_parse_int(const char *s, long lo, long hi, long *out);
/* Format a one-line message into err; returns -1 (for `return perf_fail(...)`). */
int perf_fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The usage text, for -h and errors. */
const char *perf_usage(void);

#endif

/* perf_args.c — parses allreduce_perf's command line (see perf_args.h).
 *
 * Flags, meanings and defaults follow nccl-tests' all_reduce_perf so command
 * lines carry over; values are checked strictly (trailing junk, ranges).
 *
 * Must not: print, exit, or touch MPI/NCCL/CUDA. */
#include "perf_args.h"
#include "perf_data.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
  "USAGE: allreduce_perf\n"
  "\t[-t,--nthreads <1>]            threads per process (only 1)\n"
  "\t[-g,--ngpus <1>]               GPUs per thread (only 1)\n"
  "\t[-b,--minbytes <min size in bytes, K/M/G suffix>]\n"
  "\t[-e,--maxbytes <max size in bytes, K/M/G suffix>]\n"
  "\t[-i,--stepbytes <increment size>]\n"
  "\t[-f,--stepfactor <increment factor>]\n"
  "\t[-n,--iters <iteration count>]\n"
  "\t[-m,--agg_iters <operations aggregated per iteration>]\n"
  "\t[-w,--warmup_iters <warmup iteration count>]\n"
  "\t[-c,--check <0/1: check results>]\n"
  "\t[-o,--op <sum/prod/min/max/avg/all>]\n"
  "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]\n"
  "\t[-a,--average <0/1/2/3> time across ranks: rank 0, mean, min, max]\n"
  "\t[-z,--blocking <0/1> wait for completion and barrier after each collective]\n"
  "\t[-G,--cudagraph <number of CUDA graph launches, 0 = none>]\n"
  "\t[-J,--output_json <file>]\n"
  "\t[-R,--random <0/1> random floating-point inputs checked against a bound]\n"
  "\t[-h,--help]\n"
  "Environment: ALLREDUCE_PERF_MEM=auto|host|cuda (buffers; auto = cuda when a GPU\n"
  "is visible), ALLREDUCE_PERF_CORRUPT=1 (debugging: rank 0 flips one result\n"
  "element before checking, to prove the checker fails), NCCL_TESTS_MIN_BW.\n";

const char *perf_usage(void) { return usage_text; }

double perf_parse_size(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno != 0 || !(v >= 0)) return -1;
  double unit = 1;
  switch (*end) {
  case 'K': case 'k': unit = 1024.0; end++; break;
  case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
  case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
  case '\0': break;
  default: return -1;
  }
  return *end ? -1 : v * unit;
}

int perf_fail(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

int perf_parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (end == s || *end || errno != 0 || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* -d / -o: one name or "all". */
static int parse_list(const char *s, int (*index)(const char *), int n, int *out, int *nout) {
  if (strcmp(s, "all") == 0) {
    for (int i = 0; i < n; i++) out[i] = i;
    *nout = n;
    return 0;
  }
  int i = index(s);
  if (i < 0) return -1;
  out[0] = i;
  *nout = 1;
  return 0;
}

int perf_parse_args(int argc, char **argv, perf_opts_t *o, char *err, size_t errlen) {
  static const struct option longopts[] = {
    {"nthreads", required_argument, 0, 't'},   {"ngpus", required_argument, 0, 'g'},
    {"minbytes", required_argument, 0, 'b'},   {"maxbytes", required_argument, 0, 'e'},
    {"stepbytes", required_argument, 0, 'i'},  {"stepfactor", required_argument, 0, 'f'},
    {"iters", required_argument, 0, 'n'},      {"agg_iters", required_argument, 0, 'm'},
    {"warmup_iters", required_argument, 0, 'w'}, {"check", required_argument, 0, 'c'},
    {"op", required_argument, 0, 'o'},         {"datatype", required_argument, 0, 'd'},
    {"average", required_argument, 0, 'a'},    {"blocking", required_argument, 0, 'z'},
    {"cudagraph", required_argument, 0, 'G'},  {"output_json", required_argument, 0, 'J'},
    {"random", required_argument, 0, 'R'},     {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};
  /* nccl-tests' defaults. */
  *o = (perf_opts_t){.min_bytes = 32u << 20, .max_bytes = 32u << 20, .step_bytes = 1u << 20,
                     .step_factor = 1, .iters = 20, .warmup = 5, .agg = 1, .check = 1,
                     .average = 1, .ntypes = 1, .nops = 1};
  o->types[0] = perf_type_index("float");
  o->ops[0] = perf_op_index("sum");
  optind = 1;
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:c:o:d:a:z:G:J:R:h", longopts, NULL);
    if (c == -1) break;
    long v = 0;
    double sz;
    switch (c) {
    case 't': case 'g':
      if (perf_parse_int(optarg, 1, 1, &v)) return perf_fail(err, errlen, "-%c %s: only 1 is supported (one rank per process)", c, optarg);
      break;
    case 'b': case 'e':
      if ((sz = perf_parse_size(optarg)) < 0) return perf_fail(err, errlen, "invalid size for -%c: '%s'", c, optarg);
      if (sz > PERF_MAX_SIZE)
        return perf_fail(err, errlen, "size for -%c too large: '%s' (at most %.0f bytes, 1P)", c, optarg, PERF_MAX_SIZE);
      *(c == 'b' ? &o->min_bytes : &o->max_bytes) = (size_t)sz;
      break;
    case 'i':
      if ((sz = perf_parse_size(optarg)) < 0) return perf_fail(err, errlen, "invalid size for -i: '%s'", optarg);
      if (sz > PERF_MAX_SIZE)
        return perf_fail(err, errlen, "size for -i too large: '%s' (at most %.0f bytes, 1P)", optarg, PERF_MAX_SIZE);
      o->step_bytes = (size_t)sz;
      break;
    case 'f':
      if (perf_parse_int(optarg, 1, 1 << 20, &v)) return perf_fail(err, errlen, "invalid -f '%s' (integer >= 1)", optarg);
      o->step_factor = v;
      break;
    case 'n': case 'w': case 'm': case 'c': case 'G': {
      long lo = (c == 'n' || c == 'm') ? 1 : 0;
      if (perf_parse_int(optarg, lo, 1 << 30, &v)) return perf_fail(err, errlen, "invalid -%c '%s' (integer >= %ld)", c, optarg, lo);
      int *dst = c == 'n' ? &o->iters : c == 'w' ? &o->warmup : c == 'm' ? &o->agg
               : c == 'c' ? &o->check : &o->graph_launches;
      *dst = (int)v;
      break;
    }
    case 'a':
      if (perf_parse_int(optarg, 0, 3, &v)) return perf_fail(err, errlen, "invalid -a '%s' (0 rank 0, 1 mean, 2 min, 3 max)", optarg);
      o->average = (int)v;
      break;
    case 'z': case 'R':
      if (perf_parse_int(optarg, 0, 1, &v)) return perf_fail(err, errlen, "invalid -%c '%s' (0 or 1)", c, optarg);
      *(c == 'z' ? &o->blocking : &o->random) = (int)v;
      break;
    case 'o':
      if (parse_list(optarg, perf_op_index, perf_nops, o->ops, &o->nops))
        return perf_fail(err, errlen, "invalid -o '%s' (sum, prod, min, max, avg or all)", optarg);
      break;
    case 'd':
      if (parse_list(optarg, perf_type_index, perf_ntypes, o->types, &o->ntypes))
        return perf_fail(err, errlen, "invalid -d '%s' (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 or all)", optarg);
      break;
    case 'J':
      o->json_path = optarg;
      break;
    case 'h':
      snprintf(err, errlen, "%s", usage_text);
      return 1;
    case ':':
      return perf_fail(err, errlen, "option -%c needs a value", optopt);
    default:
      if (optopt) return perf_fail(err, errlen, "unknown option -%c", optopt);
      return perf_fail(err, errlen, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return perf_fail(err, errlen, "unexpected argument '%s'", argv[optind]);
  if (o->max_bytes < o->min_bytes)
    return perf_fail(err, errlen, "maxbytes (%zu) is smaller than minbytes (%zu)", o->max_bytes, o->min_bytes);
  if (o->step_factor <= 1 && o->step_bytes == 0 && o->max_bytes > o->min_bytes)
    return perf_fail(err, errlen, "stepbytes is 0 and stepfactor 1: the size would never grow");
  if (o->step_factor > 1 && o->min_bytes == 0 && o->max_bytes > 0)
    return perf_fail(err, errlen, "minbytes 0 with a step factor: the size would never grow");
  if (o->blocking && o->graph_launches)
    return perf_fail(err, errlen, "-z 1 and -G cannot be combined (no synchronisation inside a graph capture)");
  return 0;
}

/* perf_out.c — allreduce_perf's text and JSON report (see perf_out.h).
 *
 * Text: column widths and number formats are nccl-tests' classic ones
 * ("%7s" time with 2/1/0 decimals by magnitude, "%6.2f" bandwidths, "%5g"
 * #wrong), so `diff` against all_reduce_perf output shows only the numbers.
 * JSON: one document; keys of rows and footer as in nccl-tests' -J output
 * (size, count, type, redop, root, out_of_place/in_place {time, alg_bw,
 * bus_bw, nwrong}), plus ours (wire, max_rel_err, shim). Written as the run
 * goes, so a crash leaves the rows so far.
 *
 * Must not: call MPI, NCCL or CUDA. */
#include "perf_out.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define PRINT(o, ...) do { if ((o)->print) printf(__VA_ARGS__); } while (0)

/* ---- JSON helpers ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* JSON has no Inf/NaN: written as strings, like nccl-tests does for NaN. */
static void json_num(FILE *f, double v) {
  if (isnan(v)) fputs("\"nan\"", f);
  else if (isinf(v)) fputs(v > 0 ? "\"inf\"" : "\"-inf\"", f);
  else fprintf(f, "%.17g", v);
}

static void json_now(FILE *f) {
  char buf[64];
  time_t now = time(NULL);
  struct tm tm;
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
  json_str(f, buf);
}

int perf_out_open(perf_out_t *o, int print, int extra, const char *path,
                  int argc, char **argv, char *err, size_t errlen) {
  *o = (perf_out_t){.print = print, .extra = extra};
  if (!print || !path) return 0;
  if (!(o->json = fopen(path, "w"))) {
    snprintf(err, errlen, "-J %s: cannot open for writing", path);
    return -1;
  }
  FILE *f = o->json;
  fputs("{\"version\":1,\"program\":\"allreduce_perf\",\"start_time\":", f);
  json_now(f);
  fputs(",\"args\":[", f);
  for (int i = 0; i < argc; i++) {
    if (i) fputc(',', f);
    json_str(f, argv[i]);
  }
  fputc(']', f);
  return 0;
}

void perf_out_config(perf_out_t *o, const perf_opts_t *opts, int nranks, const char *mem,
                     int graphs_ok, const char *shim_version, const ncclshim_stats_t *shim) {
  const int factor = opts->step_factor > 1;
  PRINT(o, "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d\n",
        opts->min_bytes, opts->max_bytes, factor ? (size_t)opts->step_factor : opts->step_bytes,
        factor ? "factor" : "bytes", opts->warmup, opts->iters, opts->agg, opts->check,
        graphs_ok ? opts->graph_launches : 0);
  if (opts->blocking) PRINT(o, "# Blocking Enabled: wait for completion and barrier after each collective \n");
  PRINT(o, "# allreduce_perf: %d ranks, %s buffers, time: host clock around the launches and a stream sync\n", nranks, mem);
  PRINT(o, "# data: %s\n", opts->random ? "random floating-point inputs checked against (n+1)*u*sum|x| (integers: exact)"
                                        : "exact by construction, checked bit for bit");
  if (opts->graph_launches && !graphs_ok)
    PRINT(o, "# CUDA graphs unavailable (%s buffers): -G %d ignored\n", mem, opts->graph_launches);
  if (shim_version)
    PRINT(o, "# ncclshim %s preloaded: wire %s, enabled %d (at start)\n", shim_version, shim->wire, shim->enabled);
  else
    PRINT(o, "# ncclshim: not loaded\n");
  if (o->extra)
    PRINT(o, "# extra columns: wire = what the shim did (fp16/bf16 compressed, skip = answered locally, - = neither);\n"
             "#   maxrelerr = max |got - exact| / sum|x_r| (avg: / (sum|x_r|/n); prod, min, max: / |exact|)\n");
  PRINT(o, "#\n");
  if (!o->json) return;
  FILE *f = o->json;
  fprintf(f, ",\"config\":{\"nranks\":%d,\"nthreads\":1,\"ngpus\":1,\"minimum_bytes\":%zu,\"maximum_bytes\":%zu,",
          nranks, opts->min_bytes, opts->max_bytes);
  if (factor) fprintf(f, "\"step_factor\":%ld,", opts->step_factor);
  else fprintf(f, "\"step_bytes\":%zu,", opts->step_bytes);
  fprintf(f, "\"warmup_iters\":%d,\"iterations\":%d,\"aggregated_iterations\":%d,\"validation\":%d,"
             "\"graph\":%d,\"blocking_collectives\":%s,\"average\":%d,\"random_inputs\":%s,\"memory\":",
          opts->warmup, opts->iters, opts->agg, opts->check, graphs_ok ? opts->graph_launches : 0,
          opts->blocking ? "true" : "false", opts->average, opts->random ? "true" : "false");
  json_str(f, mem);
  fputs("},\"shim\":", f);
  if (shim_version) {
    fputs("{\"version\":", f);
    json_str(f, shim_version);
    fputs(",\"wire\":", f);
    json_str(f, shim->wire);
    fprintf(f, ",\"enabled\":%d}", shim->enabled);
  } else {
    fputs("null", f);
  }
}

void perf_out_devices(perf_out_t *o, const perf_device_t *d, int n) {
  PRINT(o, "# Using devices\n");
  for (int i = 0; i < n; i++)
    PRINT(o, "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", d[i].rank, 0, (int)d[i].pid,
          d[i].host, d[i].device, d[i].desc);
  if (!o->json) return;
  fputs(",\"devices\":[", o->json);
  for (int i = 0; i < n; i++) {
    fprintf(o->json, "%s{\"rank\":%d,\"group\":0,\"pid\":%d,\"hostname\":", i ? "," : "", d[i].rank, (int)d[i].pid);
    json_str(o->json, d[i].host);
    fprintf(o->json, ",\"device\":%d,\"device_info\":", d[i].device);
    json_str(o->json, d[i].desc);
    fputc('}', o->json);
  }
  fputc(']', o->json);
}

void perf_out_table_header(perf_out_t *o) {
  PRINT(o, "#\n");
  PRINT(o, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "");
  PRINT(o, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count", "type", "redop",
        "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  if (o->extra) PRINT(o, "  %5s  %9s  %5s  %9s", "wire", "maxrelerr", "wire", "maxrelerr");
  PRINT(o, "\n");
  PRINT(o, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)", "(elements)", "", "", "",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (o->extra) PRINT(o, "  %5s  %9s  %5s  %9s", "(o)", "(o)", "(i)", "(i)");
  PRINT(o, "\n");
  if (o->json) fputs(",\"results\":[", o->json);
}

static void time_str(char *buf, size_t len, double us) {
  snprintf(buf, len, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

static void json_half(FILE *f, const char *key, const perf_result_t *r) {
  fprintf(f, ",\"%s\":{\"time\":", key);
  json_num(f, r->time_us);
  fputs(",\"alg_bw\":", f);
  json_num(f, r->algbw);
  fputs(",\"bus_bw\":", f);
  json_num(f, r->busbw);
  if (r->wrong >= 0) fprintf(f, ",\"nwrong\":%lld,\"max_rel_err\":", r->wrong);
  else fputs(",\"nwrong\":null,\"max_rel_err\":", f);
  if (r->wrong >= 0) json_num(f, r->max_relerr);
  else fputs("null", f);
  fputs(",\"wire\":", f);
  json_str(f, r->wire);
  fputc('}', f);
}

void perf_out_row(perf_out_t *o, size_t bytes, size_t count, const char *type,
                  const char *op, const perf_result_t res[2]) {
  char t[32];
  PRINT(o, "%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, -1);
  for (int h = 0; h < 2; h++) {
    time_str(t, sizeof t, res[h].time_us);
    if (res[h].wrong >= 0) PRINT(o, "  %7s  %6.2f  %6.2f  %5g", t, res[h].algbw, res[h].busbw, (double)res[h].wrong);
    else PRINT(o, "  %7s  %6.2f  %6.2f  %5s", t, res[h].algbw, res[h].busbw, "N/A");
  }
  if (o->extra) {
    for (int h = 0; h < 2; h++) {
      if (res[h].wrong >= 0) PRINT(o, "  %5s  %9.2e", res[h].wire, res[h].max_relerr);
      else PRINT(o, "  %5s  %9s", res[h].wire, "N/A");
    }
  }
  PRINT(o, "\n");
  if (!o->json) return;
  FILE *f = o->json;
  fprintf(f, "%s{\"size\":%zu,\"count\":%zu,\"type\":", o->json_rows++ ? "," : "", bytes, count);
  json_str(f, type);
  fputs(",\"redop\":", f);
  json_str(f, op);
  fputs(",\"root\":-1", f);
  json_half(f, "out_of_place", &res[0]);
  json_half(f, "in_place", &res[1]);
  fputc('}', f);
  fflush(f);
}

void perf_out_table_end(perf_out_t *o) {
  if (o->json) fputs("]", o->json);
}

#define SHIM_COUNTERS(X) X(calls) X(passthrough) X(compressed) X(skipped) X(fused) X(real_calls) \
  X(logical_bytes) X(wire_bytes) X(overflow) X(underflow)

void perf_out_shim(perf_out_t *o, const ncclshim_stats_t *s, int differ, uint64_t chk_over, uint64_t chk_under) {
  PRINT(o, "# ncclshim counters (rank 0, wire %s, enabled %d)%s:\n", s->wire, s->enabled,
        differ ? "; counts DIFFER across ranks: FAILED" : "; same on every rank");
  PRINT(o, "#   calls %llu  passthrough %llu  compressed %llu  skipped %llu  fused %llu  real_calls %llu\n",
        (unsigned long long)s->calls, (unsigned long long)s->passthrough, (unsigned long long)s->compressed,
        (unsigned long long)s->skipped, (unsigned long long)s->fused, (unsigned long long)s->real_calls);
  PRINT(o, "#   logical_bytes %llu  wire_bytes %llu\n", (unsigned long long)s->logical_bytes,
        (unsigned long long)s->wire_bytes);
  PRINT(o, "#   in the checked launches (inputs as generated): overflow %llu  underflow %llu; in all launches: "
        "overflow %llu  underflow %llu (the timed ones reduce their own results again)\n",
        (unsigned long long)chk_over, (unsigned long long)chk_under, (unsigned long long)s->overflow,
        (unsigned long long)s->underflow);
  if (!o->json) return;
  fputs(",\"shim_stats\":{", o->json);
#define X(name) fprintf(o->json, "\"" #name "\":%llu,", (unsigned long long)s->name);
  SHIM_COUNTERS(X)
#undef X
  fputs("\"wire\":", o->json);
  json_str(o->json, s->wire);
  fprintf(o->json, ",\"enabled\":%d,\"ranks_agree\":%s,\"checked_overflow\":%llu,\"checked_underflow\":%llu}",
          s->enabled, differ ? "false" : "true", (unsigned long long)chk_over, (unsigned long long)chk_under);
}

void perf_out_footer(perf_out_t *o, int errors, double avg_bw, double min_bw) {
  const char *bw_verdict = min_bw < 0 ? "" : avg_bw < min_bw * 0.9 ? "FAILED" : "OK";
  PRINT(o, "# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  PRINT(o, "# %-20s : %g %s\n", "Avg bus bandwidth", avg_bw, bw_verdict);
  PRINT(o, "#\n");
  fflush(stdout);
  if (!o->json) return;
  FILE *f = o->json;
  fprintf(f, ",\"out_of_bounds\":{\"count\":%d,\"okay\":%s},\"average_bus_bandwidth\":{\"bandwidth\":",
          errors, errors ? "false" : "true");
  json_num(f, avg_bw);
  fputs(",\"okay\":", f);
  if (min_bw < 0) json_str(f, "unchecked");
  else fputs(avg_bw < min_bw * 0.9 ? "false" : "true", f);
  fputs("},\"end_time\":", f);
  json_now(f);
  fputs("}\n", f);
  fclose(f);
  o->json = NULL;
}

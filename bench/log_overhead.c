/* log_overhead.c — what the shim's log adds per call: ns per 8-byte fp32
 * ncclAllReduce on a 1-rank communicator, with no preload and with the shim
 * at NCCLSHIM_LOG=off, summary and calls, measured side by side.
 *
 *   log_overhead [-n CALLS] [-r ROUNDS] [-s SHIM] [-l NCCL_DIR] [-I]
 *     -n  calls per measurement (default 100000, after 1000 warm-up calls)
 *     -r  rounds (default 7); each round runs every variant once, in turn
 *     -s  the shim (default: ../lib/libncclshim.so next to this program)
 *     -l  directory of the libnccl.so.2 to use (default: ../lib/hostnccl)
 *     -I  also count instructions per call under valgrind (callgrind): the
 *         difference between runs of 2N and N calls, divided by N; repeatable
 *         where wall-clock time on a shared machine is not
 *
 * Each measurement is a fresh process (this program re-executed with
 * --child and the variant's environment), so variants share nothing but the
 * machine; alternating them within each round spreads the machine's drift
 * over all of them. Printed: the median ns/call of each variant and the
 * median over rounds of its difference to "no preload" in the same round.
 * On the host NCCL the 8-byte all-reduce is a passthrough (below
 * NCCLSHIM_MIN_BYTES) whose own cost is a few hundred ns, so the difference
 * is the shim's per-call bookkeeping and the log's. Must not: be used as a
 * test (it asserts nothing); numbers are for the machine it runs on. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { NVAR = 4 };
static const char *var_name[NVAR] = {"no preload", "shim LOG=off", "shim LOG=summary", "shim LOG=calls"};
static const char *var_log[NVAR] = {NULL, "off", "summary", "calls"};
static const int target_ns[NVAR] = {0, 100, 300, 1000};

static char self_path[PATH_MAX];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define NCCL(call)                                                                     \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "log_overhead: %s -> %s\n", #call, ncclGetErrorString(r_));      \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

/* One measurement: ns per call, printed on stdout. */
static int child(long calls) {
  ncclUniqueId id;
  ncclComm_t comm;
  float buf[2] = {1.0f, 2.0f};
  NCCL(ncclGetUniqueId(&id));
  NCCL(ncclCommInitRank(&comm, 1, id, 0));
  for (int i = 0; i < 1000; i++) NCCL(ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, NULL));
  double t0 = now_s();
  for (long i = 0; i < calls; i++) NCCL(ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, NULL));
  double t1 = now_s();
  printf("%.3f\n", (t1 - t0) * 1e9 / (double)calls);
  fflush(stdout);
  NCCL(ncclCommDestroy(comm)); /* the log is written here, outside the timed loop */
  return 0;
}

/* Instructions counted by callgrind, from its stderr ("Collected : N"). */
static double collected(const char *errf) {
  FILE *f = fopen(errf, "r");
  char line[512];
  double n = -1;
  while (f && fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "Collected :");
    if (p) n = atof(p + 11);
  }
  if (f) fclose(f);
  return n;
}

/* Run one variant in a fresh process; returns ns/call (instr: the process's
 * instruction count under callgrind), or -1. */
static double run_variant(int v, long calls, const char *shim, const char *nccldir, const char *tmpdir, int instr) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t p = fork();
  if (p < 0) return -1;
  if (p == 0) {
    close(fd[0]);
    dup2(fd[1], 1);
    char errf[PATH_MAX];
    snprintf(errf, sizeof errf, "%s/child.err", tmpdir); /* callgrind's report, too */
    if (!freopen(errf, "w", stderr)) _exit(127); /* the shim's tables (LOG=calls, rank 0) are not ours to print */
    const char *old = getenv("LD_LIBRARY_PATH");
    char lib[PATH_MAX * 2], logf[PATH_MAX], n[32];
    snprintf(lib, sizeof lib, "%s%s%s", nccldir, old ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", lib, 1);
    unsetenv("LD_PRELOAD");
    for (char **e = environ; *e;) { /* a clean shim configuration */
      if (!strncmp(*e, "NCCLSHIM_", 9)) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(*e, '=') ? strchr(*e, '=') - *e : 0), *e);
        unsetenv(name);
      } else {
        e++;
      }
    }
    if (var_log[v]) {
      setenv("LD_PRELOAD", shim, 1);
      setenv("NCCLSHIM_LOG", var_log[v], 1);
      setenv("NCCLSHIM_BANNER", "0", 1);
      snprintf(logf, sizeof logf, "%s/log_overhead.%%p.jsonl", tmpdir);
      setenv("NCCLSHIM_LOG_FILE", logf, 1);
    }
    snprintf(n, sizeof n, "%ld", calls);
    if (instr)
      execlp("valgrind", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", self_path, "--child", n,
             (char *)NULL);
    else
      execl(self_path, "log_overhead", "--child", n, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char out[64] = "";
  ssize_t got = 0, r;
  while (got < (ssize_t)sizeof out - 1 && (r = read(fd[0], out + got, sizeof out - 1 - (size_t)got)) > 0) got += r;
  close(fd[0]);
  int st = 0;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got <= 0) return -1;
  if (instr) {
    char errf[PATH_MAX];
    snprintf(errf, sizeof errf, "%s/child.err", tmpdir);
    return collected(errf);
  }
  return atof(out);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) return child(atol(argv[2]));
  long calls = 100000;
  int rounds = 7, opt, instr = 0;
  char self[PATH_MAX], shim[PATH_MAX], nccldir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (n <= 0) return 1;
  self_path[n] = '\0';
  snprintf(self, sizeof self, "%s", self_path);
  char *dir = dirname(self);
  snprintf(shim, sizeof shim, "%s/../lib/libncclshim.so", dir);
  snprintf(nccldir, sizeof nccldir, "%s/../lib/hostnccl", dir);
  while ((opt = getopt(argc, argv, "n:r:s:l:I")) != -1) {
    switch (opt) {
    case 'n': calls = atol(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 's': snprintf(shim, sizeof shim, "%s", optarg); break;
    case 'l': snprintf(nccldir, sizeof nccldir, "%s", optarg); break;
    case 'I': instr = 1; break;
    default: fprintf(stderr, "usage: log_overhead [-n CALLS] [-r ROUNDS] [-s SHIM] [-l NCCL_DIR] [-I]\n"); return 2;
    }
  }
  if (calls < 1 || rounds < 1 || rounds > 101) return 2;
  if (access(shim, R_OK)) {
    fprintf(stderr, "log_overhead: no shim at %s (-s): %s\n", shim, strerror(errno));
    return 1;
  }
  char tmpdir[] = "/tmp/log_overhead.XXXXXX";
  if (!mkdtemp(tmpdir)) return 1;
  double t[NVAR][101], d[NVAR][101];
  for (int r = 0; r < rounds; r++)
    for (int v = 0; v < NVAR; v++) {
      t[v][r] = run_variant(v, calls, shim, nccldir, tmpdir, 0);
      if (t[v][r] < 0) {
        fprintf(stderr, "log_overhead: variant '%s' failed (shim %s, NCCL in %s); its stderr:\n", var_name[v], shim,
                nccldir);
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s/child.err' >&2", tmpdir);
        if (system(cmd)) fprintf(stderr, "(none)\n");
        return 1;
      }
    }
  double ins[NVAR] = {0};
  long ncg = calls < 20000 ? calls : 20000; /* callgrind runs ~50x slower */
  for (int v = 0; instr && v < NVAR; v++) {
    double a = run_variant(v, ncg, shim, nccldir, tmpdir, 1), b = run_variant(v, 2 * ncg, shim, nccldir, tmpdir, 1);
    ins[v] = a < 0 || b < 0 ? -1 : (b - a) / (double)ncg;
    if (ins[v] < 0) fprintf(stderr, "log_overhead: -I: callgrind run of '%s' failed (is valgrind installed?)\n",
                            var_name[v]);
  }
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "log_overhead: could not remove %s\n", tmpdir);
  for (int v = 0; v < NVAR; v++)
    for (int r = 0; r < rounds; r++) d[v][r] = t[v][r] - t[0][r];
  printf("# log_overhead: %ld ncclAllReduce calls of 8 bytes (fp32 x 2, a passthrough), 1 rank, NCCL from %s\n", calls,
         nccldir);
  printf("# each variant a fresh process, alternated; median of %d rounds; added = median of same-round differences\n",
         rounds);
  printf("# %-18s %10s %10s %10s%s\n", "variant", "ns/call", "added(ns)", "target",
         instr ? "   instr/call  added(instr)" : "");
  for (int v = 0; v < NVAR; v++) {
    double m = median(t[v], rounds), a = median(d[v], rounds);
    if (v == 0) printf("  %-18s %10.1f %10s %10s", var_name[v], m, "-", "-");
    else printf("  %-18s %10.1f %10.1f %10d", var_name[v], m, a, target_ns[v]);
    if (instr) printf(" %12.0f %13.0f", ins[v], ins[v] - ins[0]);
    printf("\n");
  }
  return 0;
}

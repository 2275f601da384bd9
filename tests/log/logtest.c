/* logtest.c — a known all-reduce workload for checking the shim's log
 * (tests/t/50-log.sh). An MPI program over any libnccl.so.2 (the host NCCL
 * in tests); the shim comes in through LD_PRELOAD.
 *
 *   logtest [-i N] [-n C] [-d R:US] [-f] [-N LIB] [-k FILE:K [-K]] [-t|-T]
 *     -i N     iterations per communicator (default 10)
 *     -n C     communicators used one after the other (default 1); each but
 *              the last is destroyed after its iterations, the last is left
 *              to process exit (so both ways of closing a log are exercised)
 *     -d R:US  rank R sleeps US microseconds before each operation (a
 *              straggler for the cross-rank report); R = -1: every rank
 *              (a paced job, whose log writer keeps up with every record)
 *     -f       halfway through the last communicator, fork a child that
 *              exits at once through exit() (running atexit handlers)
 *     -N LIB   dlopen LIB (RTLD_GLOBAL) before the first NCCL call, as a
 *              program that uses NVTX would have libnvToolsExt loaded
 *     -k FILE:K  after K iterations of the last communicator, write the pid
 *              to FILE.<rank> and sleep until killed (a job stopped mid-run)
 *     -K       with -k: keep iterating after writing the pid (killed busy)
 *     -t       install a SIGTERM handler of the program's own before the
 *              first NCCL call: it writes "logtest: SIGTERM handler ran" to
 *              stderr and _exits with status 3
 *     -T       the same, but the handler only notes the signal: the program
 *              survives SIGTERM, stops waiting (-k) and runs to its end
 *
 * One iteration, with default shim settings (MIN_BYTES 64 KiB, fusion on):
 *   A  fp32 Sum, 16384 elements (64 KiB)        -> compressed
 *   B  fp32 Sum, 1000 elements                  -> passthrough (below MIN_BYTES)
 *   C  int32 Sum, 256 elements                  -> passthrough
 *   G1 group of 3 fp32 Sum x 8192 elements      -> fused: one collective, 96 KiB
 *   G2 group of 2 fp32 Sum x 100 elements       -> too small to fuse: 2 passthroughs
 * = 8 calls, 6 records. Inputs are small integers, so every sum is exact in
 * fp16 and each result is checked element by element (A is not checked when
 * NCCLSHIM_ACCUM_STEPS > 1: a skipped call answers locally). Exit 0 = pass. */
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../shim/testmpi.h"

static int rank, nranks, delay_rank = -2, delay_us;
static int failures;


static void straggle(void) {
  if (rank == delay_rank || delay_rank == -1) usleep((useconds_t)delay_us);
}


/* Element i of rank r: (r + 1) * (i % 4 + 1); the sum over ranks is
 * n(n+1)/2 * (i % 4 + 1). */
static void fill(float *f, int *n32, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (f) f[i] = (float)((rank + 1) * (int)(i % 4 + 1));
    if (n32) n32[i] = (rank + 1) * (int)(i % 4 + 1);
  }
}

static void check(const char *what, const float *f, const int *n32, size_t n) {
  long tri = (long)nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < n; i++) {
    long want = tri * (long)(i % 4 + 1);
    double got = f ? (double)f[i] : (double)n32[i];
    if (got != (double)want) {
      if (failures++ < 10) fprintf(stderr, "FAIL rank %d: %s element %zu = %g, expected %ld\n", rank, what, i, got, want);
      return;
    }
  }
}

static void iteration(ncclComm_t c, int check_a) {
  enum { NA = 16384, NB = 1000, NC = 256, NG1 = 8192, NG2 = 100 };
  static float a[NA], b[NB], g1[3][NG1], g2[2][NG2];
  static int ci[NC];
  fill(a, NULL, NA);
  straggle();
  NCCL_OK(ncclAllReduce(a, a, NA, ncclFloat32, ncclSum, c, NULL));
  if (check_a) check("A", a, NULL, NA);
  fill(b, NULL, NB);
  straggle();
  NCCL_OK(ncclAllReduce(b, b, NB, ncclFloat32, ncclSum, c, NULL));
  check("B", b, NULL, NB);
  fill(NULL, ci, NC);
  straggle();
  NCCL_OK(ncclAllReduce(ci, ci, NC, ncclInt32, ncclSum, c, NULL));
  check("C", NULL, ci, NC);
  straggle();
  NCCL_OK(ncclGroupStart());
  for (int k = 0; k < 3; k++) {
    fill(g1[k], NULL, NG1);
    NCCL_OK(ncclAllReduce(g1[k], g1[k], NG1, ncclFloat32, ncclSum, c, NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int k = 0; k < 3; k++) check("G1", g1[k], NULL, NG1);
  straggle();
  NCCL_OK(ncclGroupStart());
  for (int k = 0; k < 2; k++) {
    fill(g2[k], NULL, NG2);
    NCCL_OK(ncclAllReduce(g2[k], g2[k], NG2, ncclFloat32, ncclSum, c, NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int k = 0; k < 2; k++) check("G2", g2[k], NULL, NG2);
}

static volatile sig_atomic_t got_term; /* -T: SIGTERM came, and was survived */

/* Stopped mid-run: the pid tells the test whom to kill. */
static void wait_for_kill(const char *file, int busy) {
  char path[4096], pid[32];
  snprintf(path, sizeof path, "%s.%d", file, rank);
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fwrite(pid, 1, (size_t)n, f) != (size_t)n || fclose(f) || rename(tmp, path)) {
    fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  while (!busy && !got_term) sleep(100); /* a signal ends the sleep */
}

static void note_term(int sig) {
  (void)sig;
  got_term = 1;
}

static void own_term(int sig) {
  (void)sig;
  static const char m[] = "logtest: SIGTERM handler ran\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(4);
  _exit(3);
}

static void fork_child(void) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) exit(0); /* atexit handlers run in the child: the shim's must write nothing */
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "FAIL rank %d: forked child did not exit cleanly\n", rank);
    failures++;
  }
}

int main(int argc, char **argv) {
  int iters = 10, ncomms = 1, do_fork = 0, kill_at = -1, busy = 0, own_handler = 0, opt;
  const char *preload = NULL;
  char kill_file[4096] = "";
  while ((opt = getopt(argc, argv, "i:n:d:fN:k:KtT")) != -1) {
    switch (opt) {
    case 'i': iters = atoi(optarg); break;
    case 'n': ncomms = atoi(optarg); break;
    case 'd': if (sscanf(optarg, "%d:%d", &delay_rank, &delay_us) != 2) return 2; break;
    case 'f': do_fork = 1; break;
    case 'N': preload = optarg; break;
    case 'k':
      if (sscanf(optarg, "%4000[^:]:%d", kill_file, &kill_at) != 2) return 2;
      break;
    case 't': own_handler = 1; break;
    case 'T': own_handler = 2; break;
    case 'K': busy = 1; break;
    default: fprintf(stderr, "usage: logtest [-i N] [-n C] [-d R:US] [-f] [-N LIB] [-k FILE:K [-K]] [-t|-T]\n"); return 2;
    }
  }
  MPI_Init(&argc, &argv);
  if (own_handler) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = own_handler == 1 ? own_term : note_term;
    sigemptyset(&sa.sa_mask); /* no SA_RESTART: the sleep returns */
    sigaction(SIGTERM, &sa, NULL);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (preload && !dlopen(preload, RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "rank %d: dlopen %s: %s\n", rank, preload, dlerror());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *k = getenv("NCCLSHIM_ACCUM_STEPS");
  int check_a = !k || atoi(k) <= 1;
  for (int n = 0; n < ncomms; n++) {
    ncclComm_t c = tm_comm_world();
    int last = n == ncomms - 1;
    for (int i = 0; i < iters; i++) {
      if (last && i == kill_at) wait_for_kill(kill_file, busy);
      if (last && do_fork && i == iters / 2) fork_child();
      iteration(c, check_a);
    }
    if (!last) NCCL_OK(ncclCommDestroy(c));
    if (last && kill_at == iters) wait_for_kill(kill_file, busy);
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 1 : 0;
}

/* shimfault_life.c — communicator lifecycle and long runs under the shim.
 *
 *   shimfault_life churn N
 *       N communicators created and destroyed (or aborted), alternating
 *       between one over all ranks and one of this rank alone, each with one
 *       compressed all-reduce: results exact; a communicator at an address a
 *       destroyed one used starts fresh (its first call makes the
 *       configuration check again: 3 real calls, not 1); between N/4 and N
 *       communicators VmRSS grows by less than 4 MiB and open file
 *       descriptors not at all (each rank prints "banners K": the number of
 *       communicators it was rank 0 of, to count the banners against)
 *   shimfault_life fork LOGDIR
 *       after activation, fork: the child is inert (its calls reach NCCL
 *       untouched and uncounted, ncclshim_get_stats says disabled, it writes
 *       no log and nothing on stderr mentioning the shim); the parent's later
 *       calls are exact and counted
 *   shimfault_life soak N
 *       N tiny compressed all-reduces (run with NCCLSHIM_MIN_BYTES=0 and
 *       logging on), every result checked; VmRSS after N/10 and after N calls
 *       within 2 MiB
 *
 * Must not: assert timings. */
#include <sys/wait.h>
#include <unistd.h>

#include "shimfault_util.h"

enum { CN = 16384 * 4 }; /* elements of a churn call: 256 KiB, compressed by default */

/* ---- churn -------------------------------------------------------------------- */

typedef struct {
  void *addr;
  int nranks;
} seen_t;

static int cmd_churn(int n) {
  float *s = malloc(CN * 4), *r = malloc(CN * 4);
  seen_t *seen = calloc((size_t)n, sizeof *seen);
  int nseen = 0, reused = 0, reused_other_size = 0, banners = 0;
  long rss_q = 0, rss_end;
  int fd_q = 0, fd_end;
  for (int i = 0; i < n; i++) {
    int world = i % 2 == 0;
    ncclComm_t c = world ? tm_comm_world() : sf_comm_self();
    int cn = world ? nranks : 1, cr = world ? rank : 0;
    for (int k = 0; k < nseen; k++)
      if (seen[k].addr == (void *)c) {
        reused++;
        reused_other_size += seen[k].nranks != cn;
        seen[k] = seen[--nseen]; /* counted once per reuse */
        break;
      }
    seen[nseen++] = (seen_t){c, cn};
    banners += cr == 0;
    sf_fill(s, CN, rank, i);
    uint64_t before = sf_stats().real_calls;
    NCCL_OK(ncclAllReduce(s, r, CN, ncclFloat32, ncclSum, c, NULL));
    uint64_t made = sf_stats().real_calls - before;
    if (sf_shim_loaded())
      EXPECT(made == 3, "communicator %d (%p, %d ranks): first call made %llu real calls, expected 3 (check, its "
             "confirmation, "
             "collective): state left over from an earlier communicator?", i, (void *)c, cn,
             (unsigned long long)made);
    /* Exact over the communicator's own ranks (world ranks 0..cn-1 here). */
    size_t wrong = 0;
    for (size_t e = 0; e < CN; e++) {
      double want = 0;
      for (int q = 0; q < cn; q++) want += sf_val(world ? q : rank, e, i);
      wrong += r[e] != (float)want;
    }
    EXPECT(wrong == 0, "communicator %d (%d ranks): %zu wrong elements", i, cn, wrong);
    if (i % 4 == 3) NCCL_OK(ncclCommAbort(c));
    else NCCL_OK(ncclCommDestroy(c));
    if (i + 1 == n / 4) rss_q = sf_rss_kib(), fd_q = sf_fd_count();
  }
  rss_end = sf_rss_kib();
  fd_end = sf_fd_count();
  /* A leaked staging arena is 128 KiB per communicator (19 MiB over 150). */
  EXPECT(!sf_plain_run() || rss_end - rss_q < 4096, "VmRSS grew by %ld KiB between communicator %d and %d",
         rss_end - rss_q, n / 4, n);
  EXPECT(fd_end - fd_q <= 0, "open file descriptors grew from %d to %d", fd_q, fd_end);
  EXPECT(!sf_plain_run() || reused > 0,
         "no communicator was created at a reused address in %d: the test did not exercise reuse", n);
  if (rank == 0)
    printf("banners %d reused %d reused-other-size %d rss %ld -> %ld KiB fds %d -> %d\n", banners, reused,
           reused_other_size, rss_q, rss_end, fd_q, fd_end);
  else
    printf("rank %d banners %d\n", rank, banners);
  free(s);
  free(r);
  free(seen);
  return 0;
}

/* ---- fork ----------------------------------------------------------------------- */

static int same_stats(const ncclshim_stats_t *a, const ncclshim_stats_t *b) {
  return a->calls == b->calls && a->passthrough == b->passthrough && a->compressed == b->compressed &&
         a->real_calls == b->real_calls && a->logical_bytes == b->logical_bytes;
}

static int cmd_fork(const char *dir) {
  ncclComm_t c = tm_comm_world();
  float *s = malloc(CN * 4), *r = malloc(CN * 4);
  for (int k = 0; k < 3; k++) {
    sf_fill(s, CN, rank, k);
    NCCL_OK(ncclAllReduce(s, r, CN, ncclFloat32, ncclSum, c, NULL));
    sf_check(r, CN, k, nranks, 0, "before fork");
  }
  /* A call with an invalid datatype: rejected by NCCL before any
   * communication, so the child may make it on the parent's communicator.
   * In the parent the shim counts it (control for the child's check). */
  ncclshim_stats_t p0 = sf_stats();
  EXPECT(ncclAllReduce(s, r, CN, (ncclDataType_t)42, ncclSum, c, NULL) == ncclInvalidArgument, "parent: dtype 42");
  ncclshim_stats_t p1 = sf_stats();
  if (sf_shim_loaded()) EXPECT(p1.calls == p0.calls + 1, "parent: the shim did not count a call (control)");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/child-%d.err", dir, rank);
    if (!freopen(path, "w", stderr)) _exit(3);
    ncclshim_stats_t c0 = sf_stats();
    int bad = 0;
    bad |= ncclAllReduce(s, r, CN, (ncclDataType_t)42, ncclSum, c, NULL) != ncclInvalidArgument;
    bad |= (ncclGroupStart() != ncclSuccess) << 1;
    bad |= (ncclAllReduce(s, r, CN, (ncclDataType_t)42, ncclSum, c, NULL) != ncclInvalidArgument) << 2;
    bad |= (ncclGroupEnd() != ncclInvalidArgument) << 3;
    ncclResult_t ae = ncclInProgress;
    bad |= (ncclCommGetAsyncError(c, &ae) != ncclSuccess || ae != ncclSuccess) << 4;
    ncclshim_stats_t c1 = sf_stats();
    bad |= (!same_stats(&c0, &c1)) << 5;
    bad |= (sf_shim_loaded() && c1.enabled != 0) << 6;
    if (bad) fprintf(stdout, "child of rank %d: checks failed, mask %#x\n", rank, bad);
    fflush(NULL);
    exit(bad ? 1 : 0); /* atexit handlers run: the shim's must write nothing */
  }
  int st = 0;
  EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid failed");
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed its checks (status %#x)", st);
  printf("child %d of rank %d\n", (int)pid, rank);
  ncclshim_stats_t q0 = sf_stats();
  for (int k = 0; k < 3; k++) {
    sf_fill(s, CN, rank, 10 + k);
    NCCL_OK(ncclAllReduce(s, r, CN, ncclFloat32, ncclSum, c, NULL));
    sf_check(r, CN, 10 + k, nranks, 0, "parent after fork");
  }
  ncclshim_stats_t q1 = sf_stats();
  if (sf_shim_loaded()) {
    EXPECT(q1.compressed == q0.compressed + 3, "parent after fork: %llu compressed, expected 3",
           (unsigned long long)(q1.compressed - q0.compressed));
    EXPECT(q1.enabled == 1, "parent after fork: shim no longer enabled");
  }
  NCCL_OK(ncclCommDestroy(c));
  free(s);
  free(r);
  return 0;
}

/* ---- soak ------------------------------------------------------------------------ */

/* VmRSS is checked for a leak, not for the allocator's high-water marks: the
 * log writer's rounds (copies of the detail rings, one round's text) are
 * bounded but land in the allocator's arenas at sizes that depend on how
 * far the niced writer fell behind, a one-off rise of up to ~9 MiB seen
 * here. A leak grows with the calls, so it shows in both halves of the run
 * (>= 2 MiB in each: about 4.6 bytes per call), or as more than 16 MiB in
 * all. */
static int cmd_soak(long n) {
  ncclComm_t c = tm_comm_world();
  enum { SN = 8 };
  float s[SN], r[SN], want[4][SN];
  for (int k = 0; k < 4; k++)
    for (int e = 0; e < SN; e++) want[k][e] = sf_want((size_t)e, k, nranks, 0);
  long rss_tenth = 0, rss_mid = 0, bad = 0;
  const long mid = n / 10 + (n - n / 10) / 2;
  ncclshim_stats_t s0 = sf_stats();
  for (long i = 0; i < n; i++) {
    int k = (int)(i & 3), inplace = k & 1;
    sf_fill(s, SN, rank, k);
    float *out = inplace ? s : r;
    ncclResult_t res = ncclAllReduce(s, out, SN, ncclFloat32, ncclSum, c, NULL);
    if (res != ncclSuccess || memcmp(out, want[k], sizeof want[k]) != 0) {
      if (bad++ < 5) EXPECT(0, "soak call %ld: returned %d or wrong values", i, (int)res);
    }
    if (i + 1 == n / 10) rss_tenth = sf_rss_kib();
    if (i + 1 == mid) rss_mid = sf_rss_kib();
  }
  long rss_end = sf_rss_kib();
  ncclshim_stats_t s1 = sf_stats();
  EXPECT(bad == 0, "%ld of %ld soak calls wrong", bad, n);
  if (sf_shim_loaded())
    EXPECT(s1.compressed - s0.compressed == (uint64_t)n, "%llu of %ld soak calls were compressed (run with "
           "NCCLSHIM_MIN_BYTES=0)", (unsigned long long)(s1.compressed - s0.compressed), n);
  int steady = rss_mid - rss_tenth >= 2048 && rss_end - rss_mid >= 2048;
  EXPECT(!sf_plain_run() || (!steady && rss_end - rss_tenth < 16384),
         "VmRSS grew by %ld KiB between call %ld and call %ld (%ld KiB, then %ld KiB from call %ld)",
         rss_end - rss_tenth, n / 10, n, rss_mid - rss_tenth, rss_end - rss_mid, mid);
  if (rank == 0)
    printf("soak %ld calls: VmRSS %ld KiB at %ld, %ld KiB at %ld, %ld KiB at %ld\n", n, rss_tenth, n / 10, rss_mid, mid,
           rss_end, n);
  NCCL_OK(ncclCommDestroy(c));
  return 0;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "churn") && argc == 3) cmd_churn(atoi(argv[2]));
  else if (!strcmp(cmd, "fork") && argc == 3) cmd_fork(argv[2]);
  else if (!strcmp(cmd, "soak") && argc == 3) cmd_soak(atol(argv[2]));
  else EXPECT(0, "usage: shimfault_life churn N | fork LOGDIR | soak N");
  return sf_finish();
}

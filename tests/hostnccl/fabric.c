/* fabric.c — the host NCCL's emulated fabric: which node each rank is on, the
 * links a message crosses, and when a rank's share of a step is done.
 *
 * A node is a host name, as on a cluster: ranks whose processes report the
 * same gethostname() share a node (tests run each emulated node's ranks in a
 * UTS namespace of its own: `unshare --uts sh -c 'hostname emunode1 && exec
 * prog'`). When links are emulated (hn_link_on()), every communicator learns
 * its ranks' nodes at init with one all-gather of 8-byte host-name hashes,
 * outside the clock.
 *
 * Links, each full duplex (an out and an in direction, each serialising its
 * own bytes: a direction is busy until a time, and a message on it starts no
 * earlier):
 *   - intra: each rank's link to the other ranks of its node,
 *     HOSTNCCL_INTRA_GBPS (default: HOSTNCCL_LINK_GBPS, so that one host is
 *     one node with today's flat link);
 *   - NIC: between nodes, HOSTNCCL_LINK_GBPS, one per rank
 *     (HOSTNCCL_NIC_PER=rank, rail-style, the default) or one per node shared
 *     by its ranks (HOSTNCCL_NIC_PER=node): its busy times then live in shared
 *     memory named after the host name, so every process of the node charges
 *     the same NIC.
 * A step (a ring step, a chain hop, a group's point-to-point batch) charges
 * each rank's bytes to the links they cross, the sender its out directions,
 * the receiver its in directions, each when the step starts (cut-through);
 * the rank's step ends when the last of its directions is done, plus the
 * latency once. The process's links serialise every communicator and thread
 * of the process.
 *
 * Not modelled: a receiver does not wait within a step for a sender whose own
 * link is busier (the data dependency of the next step carries the lateness
 * on); switches are non-blocking (no oversubscription beyond the NICs);
 * messages of one direction are served first come, first served, not shared
 * fairly; latency is per step, not per message.
 *
 * Must not: block (charging is a compare-and-swap on a busy time), or change
 * anything when no link is emulated. */
#include "hostnccl.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Busy-until times (ns on CLOCK_MONOTONIC, one clock for every process of
 * the host) of one rank's or one node's link directions. */
typedef struct {
  uint64_t busy[HN_LINK_DIRS];
} hn_links;

static hn_links own;             /* this process's (its rank's) links */
static hn_links *node_nic;       /* HOSTNCCL_NIC_PER=node: the node's NIC, shared */
static uint64_t host_hash;
static char host_name[256];
static pthread_once_t fabric_once = PTHREAD_ONCE_INIT;

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The node's shared NIC: /dev/shm/hostnccl-nic.<host>.<uid>, created by the
 * first process of the node (zero = idle). A segment left from an earlier
 * job holds busy times in the past, which charge nothing. */
static void map_node_nic(void) {
  char name[320];
  snprintf(name, sizeof name, "/hostnccl-nic.%s.%u", host_name, (unsigned)getuid());
  for (char *p = name + 1; *p; p++)
    if (*p == '/') *p = '_';
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
  if (fd < 0) return;
  if (ftruncate(fd, sizeof(hn_links)) == 0) {
    void *m = mmap(NULL, sizeof(hn_links), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) node_nic = m;
  }
  close(fd);
}

static void fabric_init(void) {
  const char *id = getenv("NCCL_HOSTID"); /* as in NCCL: the node's name when set */
  if (id && *id) snprintf(host_name, sizeof host_name, "%s", id);
  else if (gethostname(host_name, sizeof host_name - 1) != 0) strcpy(host_name, "unknown");
  host_name[sizeof host_name - 1] = 0;
  host_hash = fnv1a64(host_name);
  if (hn_cfg()->nic_per_node) map_node_nic();
}

const char *hn_fabric_host(void) {
  pthread_once(&fabric_once, fabric_init);
  return host_name;
}

ncclResult_t hn_fabric_comm(ncclComm_t comm) {
  pthread_once(&fabric_once, fabric_init);
  if (hn_cfg()->nic_per_node && !node_nic)
    return hn_err(ncclSystemError, "hostnccl: HOSTNCCL_NIC_PER=node: cannot map the node's NIC in /dev/shm");
  int n = comm->nranks, r = comm->rank;
  comm->node = calloc((size_t)n, sizeof *comm->node);
  uint64_t *h = calloc((size_t)n, sizeof *h);
  if (!comm->node || !h) {
    free(h);
    return hn_err(ncclSystemError, "hostnccl: out of host memory");
  }
  h[r] = host_hash;
  if (!hn_link_on()) { /* no link, no node map needed: every rank on node 0 */
    free(h);
    return ncclSuccess;
  }
  /* A ring all-gather of the hashes, outside the emulated clock. */
  ncclResult_t res = ncclSuccess;
  for (int s = 0; s < n - 1 && res == ncclSuccess; s++) {
    int si = ((r - s) % n + n) % n, ri = ((r - s - 1) % n + n) % n;
    res = hn_sendrecv(comm, &h[si], sizeof *h, (r + 1) % n, &h[ri], sizeof *h, (r + n - 1) % n, HN_TAG_COLL);
  }
  /* Node index: order of first appearance among the ranks. */
  comm->nnodes = 0;
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    int j = 0;
    while (h[j] != h[i]) j++;
    comm->node[i] = j == i ? comm->nnodes++ : comm->node[j];
  }
  if (res == ncclSuccess && hn_cfg()->log)
    hn_log("comm %p rank %d/%d on node '%s' (index %d of %d)", (void *)comm, r, n, host_name, comm->node[r],
           comm->nnodes);
  free(h);
  return res;
}

int hn_link_remote(ncclComm_t comm, int peer) {
  return comm->node && peer >= 0 && peer < comm->nranks && comm->node[peer] != comm->node[comm->rank];
}

static uint64_t to_ns(const struct timespec *t) { return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec; }

/* Occupy a direction for dur ns from now or when it is free: its new busy time. */
static uint64_t occupy(uint64_t *busy, uint64_t now, uint64_t dur) {
  uint64_t old = __atomic_load_n(busy, __ATOMIC_ACQUIRE), next;
  do {
    next = (old > now ? old : now) + dur;
  } while (!__atomic_compare_exchange_n(busy, &old, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return next;
}

void hn_link_charge(struct timespec *dl, const size_t bytes[HN_LINK_DIRS]) {
  pthread_once(&fabric_once, fabric_init);
  const hn_config *c = hn_cfg();
  struct timespec t;
  hn_now(&t);
  uint64_t now = to_ns(&t), end = now;
  for (int d = 0; d < HN_LINK_DIRS; d++) {
    int nic = d == HN_NIC_OUT || d == HN_NIC_IN;
    double gbps = nic ? c->link_gbps : c->intra_gbps;
    if (!bytes[d] || gbps <= 0) continue;
    uint64_t dur = (uint64_t)((double)bytes[d] * 8.0 / gbps + 0.5); /* Gb/s = bits per ns */
    uint64_t *busy = nic && node_nic ? &node_nic->busy[d] : &own.busy[d];
    uint64_t e = occupy(busy, now, dur);
    if (e > end) end = e;
  }
  end += (uint64_t)(c->link_lat_us * 1e3 + 0.5);
  dl->tv_sec = (time_t)(end / 1000000000ull);
  dl->tv_nsec = (long)(end % 1000000000ull);
}

void hn_link_step(ncclComm_t comm, struct timespec *dl, int to, size_t out, int from, size_t in) {
  size_t b[HN_LINK_DIRS] = {0};
  if (out) b[hn_link_remote(comm, to) ? HN_NIC_OUT : HN_INTRA_OUT] += out;
  if (in) b[hn_link_remote(comm, from) ? HN_NIC_IN : HN_INTRA_IN] += in;
  hn_link_charge(dl, b);
}

/* topo.c — node keys and the node map of a communicator (see topo.h).
 *
 * The key hashes what NCCL's host hash hashes: NCCL_HOSTID when set, else the
 * host name followed by /proc/sys/kernel/random/boot_id, so that ranks NCCL
 * puts on one node are on one node here, and several emulated nodes on one
 * host (each its own UTS namespace, hence its own host name) are told apart.
 *
 * Must not: depend on anything but its inputs when building the map. */
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

int nsc_topo_host(char *buf, size_t n) {
  const char *id = getenv("NCCL_HOSTID");
  if (id && *id) {
    snprintf(buf, n, "%s", id);
    return 1;
  }
  if (gethostname(buf, n - 1) != 0) snprintf(buf, n, "unknown");
  buf[n - 1] = 0;
  return 0;
}

/* Locals only: the checks of several threads' communicators run at once. */
int64_t nsc_topo_node_key(void) {
  char host[256], buf[512];
  if (nsc_topo_host(host, sizeof host)) {
    snprintf(buf, sizeof buf, "%s", host);
  } else {
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
      if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
      fclose(f);
      boot[strcspn(boot, "\n")] = 0;
    }
    snprintf(buf, sizeof buf, "%s%s", host, boot);
  }
  uint64_t h = fnv1a(buf, 1469598103934665603ull) & ((1ull << 62) - 1);
  return (int64_t)(h ? h : 1);
}

int nsc_topo_build(nsc_topo *t, const int64_t *keys, int nranks, int rank, int *node) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < nranks; i++)
    if (keys[i] <= 0) return -1; /* t keeps nothing: node stays the caller's */
  t->nranks = nranks;
  t->rank = rank;
  t->node = node;
  for (int i = 0; i < nranks; i++) {
    int j = 0;
    while (keys[j] != keys[i]) j++;
    node[i] = j == i ? t->nnodes++ : node[j];
  }
  t->min_local = nranks;
  t->contiguous = 1;
  for (int k = 0; k < t->nnodes; k++) {
    int cnt = 0, first = -1, last = -1;
    for (int i = 0; i < nranks; i++)
      if (node[i] == k) {
        if (first < 0) first = i;
        last = i;
        cnt++;
      }
    if (cnt < t->min_local) t->min_local = cnt;
    if (cnt > t->max_local) t->max_local = cnt;
    if (last - first + 1 != cnt) t->contiguous = 0;
  }
  for (int i = 0; i < nranks; i++)
    if (node[i] == node[rank]) {
      if (i < rank) t->local_rank++;
      t->local_size++;
    }
  return 0;
}

void nsc_topo_describe(const nsc_topo *t, char *buf, size_t n) {
  if (t->nnodes <= 0) snprintf(buf, n, "nodes unknown");
  else if (t->nnodes == 1) snprintf(buf, n, "1 node");
  else if (t->min_local == t->max_local)
    snprintf(buf, n, "%d nodes x %d rank%s%s", t->nnodes, t->max_local, t->max_local == 1 ? "" : "s",
             t->contiguous ? "" : " (not node-contiguous)");
  else
    snprintf(buf, n, "%d nodes of %d..%d ranks (uneven)%s", t->nnodes, t->min_local, t->max_local,
             t->contiguous ? "" : " (not node-contiguous)");
}

void nsc_topo_free(nsc_topo *t) {
  free(t->node);
  memset(t, 0, sizeof *t);
}

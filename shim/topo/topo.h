/* topo.h — the nodes of a communicator, as every rank agrees on them.
 *
 * A node key says which machine a process runs on, by the rule NCCL uses: a
 * hash of the host name and the kernel's boot id, or of NCCL_HOSTID alone
 * when that is set. Each rank contributes its key to its communicator's
 * settings check (check.c); the map built here from the exchanged keys is
 * then the same on every rank, so decisions made from it (which algorithm)
 * are rank-consistent.
 *
 * Must not: read anything but its arguments once the keys are exchanged (the
 * map is a pure function of the key vector), or call NCCL. */
#ifndef NCCLSHIM_TOPO_H
#define NCCLSHIM_TOPO_H

#include <stddef.h>
#include <stdint.h>

typedef struct nsc_topo {
  int nranks, rank;
  int nnodes;       /* 0 until built */
  int *node;        /* each rank's node index, in order of first appearance */
  int local_rank;   /* this rank's index among its node's ranks (in rank order) */
  int local_size;   /* ranks on this rank's node */
  int min_local, max_local; /* the fewest and most ranks on one node */
  int contiguous;   /* each node's ranks are consecutive rank numbers */
} nsc_topo;

/* This process's node key, in (0, 2^62): positive, so that a Max all-reduce
 * of slots the others leave at 0 gathers every rank's key. */
int64_t nsc_topo_node_key(void);

/* What the key hashes besides the boot id, into buf: NCCL_HOSTID (returns 1)
 * or the host name (returns 0). */
int nsc_topo_host(char *buf, size_t n);

/* Build t from the gathered keys (keys[i]: rank i's). Takes node, an array of
 * nranks ints the caller allocated (t owns it on success). Returns 0, or -1
 * when a key is not positive (an exchange that did not complete; node stays
 * the caller's). */
int nsc_topo_build(nsc_topo *t, const int64_t *keys, int nranks, int rank, int *node);

/* "2 nodes x 4 ranks", "3 nodes of 1..4 ranks (uneven)", "1 node". */
void nsc_topo_describe(const nsc_topo *t, char *buf, size_t n);

void nsc_topo_free(nsc_topo *t);

#endif

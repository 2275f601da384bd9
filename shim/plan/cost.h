/* cost.h — the launch-aware cost rule: what a plan costs, in the
 * bytes one rank's link would move in the same time ("link bytes"), so that
 * launches, wire bytes and the codec compare on one scale without the
 * fabric's bandwidth:
 *
 *   cost = launches * launch price + wire bytes + exposed codec.
 *
 * A launch is an NCCL collective, or one group of sends and receives: NCCL
 * runs a communicator's launches in order and each pays a fixed cost alpha,
 * so alpha times the link's bandwidth is what a launch costs in bytes (on a
 * shared-GPU rig ~4 MB, on Ethernet and InfiniBand clusters ~0.15-1 MB).
 * The launch price is NCCLSHIM_LAUNCH_BYTES where a number pins it; at
 * auto the communicator's agreed measurement (shim/fabric/fabric.h), and
 * NSC_COST_LAUNCH_UNKNOWN until it is agreed or where it could not be
 * fitted.
 *
 * The codec's time is counted only under the host rule (some rank of the
 * communicator has its buffers in host memory, agreed at the settings check:
 * the host backend encodes on the CPU), as NSC_COST_HOST_CODEC_DIV fp32
 * bytes through the codec per link byte (measured, not derived: on 2 shared
 * cores at the emulated 1 Gb/s, a one-piece int8 two-phase call of 64 MiB on
 * 4 ranks took 0.304 of plain NCCL's time and 16 pieces 0.272, the codec
 * it exposed about 1/32 of its fp32 bytes in link time; a faster emulated
 * link makes the codec relatively dearer).
 * On device memory it is 0: a GPU encodes 64 MiB in ~40 us, far below any
 * launch. Pieces and chunks pay only by hiding codec time, so on a GPU a
 * call is one piece.
 *
 * Everything is integer arithmetic on the agreed inputs (count, rank count,
 * node map, hashed settings, the agreed memory kind and launch price), so every rank makes
 * the same choice bit for bit.
 *
 * Must not: read anything but its arguments, or use floating point. */
#ifndef NSC_COST_H
#define NSC_COST_H

#include <stdint.h>

#include "config.h"

#define NSC_COST_HOST_CODEC_DIV 32
/* An intra-node byte (hier's stages inside a node) at 1/8 of a link byte:
 * an NVLink GPU's ~450 GB/s against a 400 Gb/s NIC's 50 GB/s is the
 * narrowest ratio of the fabrics the presets are written for (a slower
 * network makes the node's links relatively cheaper still). */
#define NSC_COST_INTRA_DIV 8
/* auto compresses where a plan costs at most 9/10 of the plain call */
#define NSC_COST_GAIN_NUM 9
#define NSC_COST_GAIN_DEN 10

/* The launch price while a communicator has not agreed a measured one (and
 * where it could not be fitted): a shared-GPU rig's ~4 MB, priced high on
 * purpose (auto then leaves calls untouched that would gain, and is never
 * slower than the plain call). */
#define NSC_COST_LAUNCH_UNKNOWN (4ull << 20)

typedef struct {
  uint64_t launch; /* link bytes per launch (the launch price) */
  int host;        /* the host rule: the codec's time counts */
} nsc_cost_rule;

/* The launch price: NCCLSHIM_LAUNCH_BYTES where a number pins it, else the
 * communicator's agreed measurement (learned: 1), else the unknown price. */
static inline uint64_t nsc_cost_launch(const nsc_config *cfg, int learned, uint64_t price) {
  if (cfg->launch_bytes != NSC_CFG_AUTO) return (uint64_t)(cfg->launch_bytes > 0 ? cfg->launch_bytes : 0);
  return learned ? price : NSC_COST_LAUNCH_UNKNOWN;
}

static inline nsc_cost_rule nsc_cost_rule_of(uint64_t launch, int host) {
  nsc_cost_rule r = {launch, host != 0};
  return r;
}

/* Link bytes the codec's time is worth for `fp32` bytes through it. */
static inline uint64_t nsc_cost_codec(const nsc_cost_rule *r, uint64_t fp32) {
  return r->host ? fp32 / NSC_COST_HOST_CODEC_DIV : 0;
}

/* How many pieces (1..most) a call whose codec time is `codec` link bytes
 * should travel in, each piece costing `launches` launches: the k that
 * minimises codec / k + k * launches * r->launch (what one piece leaves
 * exposed, against what the pieces cost); ties go to fewer pieces. */
static inline int nsc_cost_pieces(const nsc_cost_rule *r, uint64_t codec, int launches, int most) {
  int best = 1;
  unsigned __int128 best_cost = 0;
  for (int k = 1; k <= most; k++) {
    unsigned __int128 c = codec / (uint64_t)k + (unsigned __int128)k * (unsigned)launches * r->launch;
    if (k == 1 || c < best_cost) best = k, best_cost = c;
  }
  return best;
}

/* a costs at most 11/10 of b (auto's margin over the cheapest candidate) */
static inline int nsc_cost_within(uint64_t a, uint64_t b) {
  return (unsigned __int128)a * 10 <= (unsigned __int128)b * 11;
}

/* a costs at most 9/10 of b (auto's gain) */
static inline int nsc_cost_gains(uint64_t a, uint64_t b) {
  return (unsigned __int128)a * NSC_COST_GAIN_DEN <= (unsigned __int128)b * NSC_COST_GAIN_NUM;
}

#endif

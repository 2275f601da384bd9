/* cost.c — see cost.h. */
#include "cost.h"

uint64_t nsc_cost_codec(const nsc_cost_rule *r, uint64_t fp32) { return r->host ? fp32 / NSC_COST_HOST_CODEC_DIV : 0; }

int nsc_cost_pieces(const nsc_cost_rule *r, uint64_t codec, int launches, int most) {
  int best = 1;
  unsigned __int128 best_cost = 0;
  for (int k = 1; k <= most; k++) {
    unsigned __int128 c = codec / (uint64_t)k + (unsigned __int128)k * (unsigned)launches * r->launch;
    if (k == 1 || c < best_cost) best = k, best_cost = c;
  }
  return best;
}

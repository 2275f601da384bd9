/* ddp_model.c — the model side of bench/ddp_step: parameter tensors, DDP's
 * bucket layouts (whole model, then rebuilt at new addresses), exact
 * gradients, SGD with momentum, hashes.
 *
 * Gradients are k/64 with |k| <= 7, built so that the sum over ranks of k is
 * a multiple of W (rank pairs carry a +b/-b each around a common a). Then a
 * bucket value (running grad)/W and every partial ring sum of them stay
 * within 11 significant bits for W = 2 and 4 and K <= 8: the fp32 reduction
 * and its fp16 quantization are both exact, in any summation order.
 *
 * Must not: communicate (ddp_comm.c does), or depend on anything but the
 * options and the rank. */
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* An embedding of P/8, then weight/bias pairs of varied sizes; the last
 * tensor takes what is left. Same sequence on every rank. */
static int make_tensors(ddp_model *m) {
  size_t P = m->P, cap = 16, left = P, base = P / 24 ? P / 24 : 1;
  uint64_t s = 12345;
  m->t = malloc(cap * sizeof *m->t);
  if (!m->t) return -1;
  m->nt = 0;
  while (left) {
    size_t n;
    if (m->nt == 0) n = P / 8;
    else if (m->nt % 2) n = base * (2 + (s = mix64(s)) % 5) / 4; /* weight */
    else n = (size_t)64 << ((s = mix64(s)) % 4);                  /* bias */
    if (n == 0 || n > left) n = left;
    if ((size_t)m->nt == cap) {
      ddp_tensor *t = realloc(m->t, 2 * cap * sizeof *t);
      if (!t) return -1;
      m->t = t;
      cap *= 2;
    }
    m->t[m->nt].off = P - left;
    m->t[m->nt].n = n;
    m->nt++;
    left -= n;
  }
  return 0;
}

int ddp_model_init(ddp_model *m, size_t P, int view) {
  memset(m, 0, sizeof *m);
  m->P = P;
  m->view = view;
  if (make_tensors(m)) return -1;
  m->p = malloc(P * sizeof *m->p);
  m->mom = calloc(P, sizeof *m->mom);
  m->g = view ? NULL : calloc(P, sizeof *m->g);
  m->lay.boff = calloc(m->nt, sizeof *m->lay.boff);
  m->lay.bidx = calloc(m->nt, sizeof *m->lay.bidx);
  if (!m->p || !m->mom || (!view && !m->g) || !m->lay.boff || !m->lay.bidx) return -1;
  for (size_t j = 0; j < P; j++) m->p[j] = (float)((int)(mix64(j ^ 0xABCDull) % 65) - 32) / 32.0f;
  return 0;
}

static void free_buckets(ddp_layout *l) {
  for (int b = 0; b < l->nb; b++) free(l->b[b].data);
  free(l->b);
  l->b = NULL;
  l->nb = 0;
}

void ddp_model_free(ddp_model *m) {
  free_buckets(&m->lay);
  free(m->lay.boff);
  free(m->lay.bidx);
  free(m->t);
  free(m->p);
  free(m->mom);
  free(m->g);
  memset(m, 0, sizeof *m);
}

static int tensor_of(const ddp_model *m, int arrival) { return m->nt - 1 - arrival; }

int ddp_model_layout(ddp_model *m, size_t first_cap, size_t cap) {
  ddp_layout nl = {0, calloc(m->nt, sizeof(ddp_bucket)), m->lay.boff, m->lay.bidx};
  if (!nl.b) return -1;
  /* DDP's assignment: in arrival order, close a bucket once it reaches its cap. */
  size_t bytes = 0;
  for (int a = 0; a < m->nt; a++) {
    ddp_bucket *b = &nl.b[nl.nb];
    if (bytes == 0) b->first = a;
    b->last = a;
    b->count += m->t[tensor_of(m, a)].n;
    bytes = b->count * sizeof(float);
    size_t limit = first_cap == 0 ? (size_t)-1 : nl.nb == 0 ? first_cap : cap;
    if (bytes >= limit || a == m->nt - 1) {
      nl.nb++;
      bytes = 0;
    }
  }
  /* New storage before the old is freed: the addresses change, as in DDP. */
  int *old_bidx = malloc(m->nt * sizeof *old_bidx);
  size_t *old_boff = malloc(m->nt * sizeof *old_boff);
  if (!old_bidx || !old_boff) goto fail;
  memcpy(old_bidx, m->lay.bidx, m->nt * sizeof *old_bidx);
  memcpy(old_boff, m->lay.boff, m->nt * sizeof *old_boff);
  for (int b = 0; b < nl.nb; b++) {
    if (!(nl.b[b].data = calloc(nl.b[b].count, sizeof(float)))) goto fail;
    size_t off = 0;
    for (int a = nl.b[b].first; a <= nl.b[b].last; a++) {
      int t = tensor_of(m, a);
      nl.bidx[t] = b;
      nl.boff[t] = off;
      off += m->t[t].n;
    }
  }
  if (m->view && m->lay.nb) /* the gradients live in the buckets: move them */
    for (int t = 0; t < m->nt; t++)
      memcpy(nl.b[nl.bidx[t]].data + nl.boff[t], m->lay.b[old_bidx[t]].data + old_boff[t],
             m->t[t].n * sizeof(float));
  free(old_bidx);
  free(old_boff);
  free_buckets(&m->lay);
  m->lay = nl;
  return 0;
fail:
  free(old_bidx);
  free(old_boff);
  for (int b = 0; b < nl.nb; b++) free(nl.b[b].data);
  free(nl.b);
  return -1;
}

float *ddp_grad(const ddp_model *m, int t) {
  return m->view ? m->lay.b[m->lay.bidx[t]].data + m->lay.boff[t] : m->g + m->t[t].off;
}

void ddp_accumulate(const ddp_model *m, int t, long i, int rank, int W) {
  float *g = ddp_grad(m, t);
  int sign = (W % 2 && rank == W - 1) ? 0 : (rank & 1) ? -1 : 1;
  size_t off = m->t[t].off;
  for (size_t e = 0; e < m->t[t].n; e++) {
    uint64_t h = mix64(((uint64_t)i << 40) ^ (off + e));
    int a = (int)(h & 7) - 4, b = (int)((h >> 3) & 3);
    g[e] += (float)(a + sign * b) * (1.0f / 64);
  }
}

int ddp_drop_tensor(const ddp_model *m) { return tensor_of(m, m->lay.b[0].last); }

void ddp_sgd_step(ddp_model *m) {
  const float lr = 0.125f, mu = 0.5f;
  for (int t = 0; t < m->nt; t++) {
    float *g = ddp_grad(m, t), *p = m->p + m->t[t].off, *v = m->mom + m->t[t].off;
    for (size_t e = 0; e < m->t[t].n; e++) {
      v[e] = mu * v[e] + g[e];
      p[e] -= lr * v[e];
    }
    memset(g, 0, m->t[t].n * sizeof *g); /* zero_grad */
  }
}

uint64_t ddp_hash(const float *x, size_t n) {
  const unsigned char *b = (const unsigned char *)x;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n * sizeof *x; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

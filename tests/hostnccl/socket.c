/* socket.c — the host NCCL's TCP transport, for programs that no mpirun
 * launched (torchrun, plain processes): bootstrap from the unique id as NCCL
 * does, a full mesh of loopback connections, split.
 *
 * ncclGetUniqueId on the root opens a listening socket and puts its address
 * (127.0.0.1 and port) and a random nonce in the id; the process keeps the
 * listener until its own ncclCommInitRank with that id. Every member opens
 * its own listener, connects to the root's address and sends (nonce, rank,
 * nranks, its port); the root, which must be a member (as over MPI), checks
 * that the ranks are distinct and agree on nranks and answers with a status
 * and the table of ports. Then rank i connects to every rank j < i and
 * accepts from every j > i, once per message class (collectives,
 * point-to-point, argument checks: one stream each, so they never overtake
 * one another), each connection opening with (nonce, rank, class); messages
 * to itself go through a socketpair. Split all-gathers (color, key, port)
 * over the parent and builds the child's mesh the same way, members ordered
 * by (key, parent rank) as MPI_Comm_split orders them.
 *
 * Sockets are nonblocking once the mesh stands; transport.c's wait moves
 * each request with hn_sock_progress and sleeps in hn_sock_poll. The emulated
 * link clock, the argument check and fault injection sit above the
 * transport, so they behave the same under both launchers.
 *
 * Must not: call MPI, block in the data path (only the bootstrap blocks), or
 * leave a connection half set up on failure (the comm is freed with its fds).
 * Loopback only: the ranks of a communicator share one host. */
#include "hostnccl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
  char magic[8];
  uint32_t addr;     /* network order */
  uint16_t port;     /* network order */
  uint16_t pad;
  uint64_t nonce;
} sock_uid;
_Static_assert(sizeof(sock_uid) <= sizeof(ncclUniqueId), "unique id too large");
static const char sock_magic[8] = "hostncs1";

/* Listeners of the ids this process created, until their init claims them. */
static pthread_mutex_t uid_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t nonce; int fd, used; } uid_tab[64];

int hn_pick_socket(void) {
  int t = hn_cfg()->transport;
  if (t != HN_TRANSPORT_AUTO) return t == HN_TRANSPORT_SOCKET;
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return 0;
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]) && *getenv(vars[i])) return 0;
  return 1;
}

int hn_sock_is_uid(const ncclUniqueId *id) { return memcmp(id->internal, sock_magic, sizeof sock_magic) == 0; }

static ncclResult_t sys_err(const char *what) {
  return hn_err(ncclSystemError, "hostnccl: %s failed: %s", what, strerror(errno));
}

/* A listener on 127.0.0.1, any port. */
static ncclResult_t listen_any(int *fd, uint16_t *port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return sys_err("socket");
  if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 256) ||
      getsockname(s, (struct sockaddr *)&a, &len)) {
    ncclResult_t r = sys_err("bind/listen");
    close(s);
    return r;
  }
  *fd = s;
  *port = a.sin_port;
  return ncclSuccess;
}

static ncclResult_t io_all(int fd, void *buf, size_t n, int is_send) {
  char *p = buf;
  while (n) {
    ssize_t k = is_send ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return sys_err(is_send ? "send" : "recv");
    if (k == 0) return hn_err(ncclRemoteError, "hostnccl: a peer closed its connection during setup");
    p += k;
    n -= (size_t)k;
  }
  return ncclSuccess;
}

static ncclResult_t connect_to(uint32_t addr, uint16_t port, int *out) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = addr, .sin_port = port};
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return sys_err("socket");
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    ncclResult_t r = hn_err(ncclSystemError, "hostnccl: connect to 127.0.0.1:%u failed: %s (is the rank "
                            "that called ncclGetUniqueId still in ncclCommInitRank?)", ntohs(port), strerror(errno));
    close(s);
    return r;
  }
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *out = s;
  return ncclSuccess;
}

ncclResult_t hn_sock_unique_id(ncclUniqueId *out) {
  sock_uid id;
  memset(&id, 0, sizeof id);
  memcpy(id.magic, sock_magic, sizeof id.magic);
  if (getrandom(&id.nonce, sizeof id.nonce, 0) != (ssize_t)sizeof id.nonce)
    return sys_err("getrandom");
  int fd;
  HN_CHECK(listen_any(&fd, &id.port));
  id.addr = htonl(INADDR_LOOPBACK);
  pthread_mutex_lock(&uid_lock);
  size_t i = 0;
  while (i < sizeof uid_tab / sizeof uid_tab[0] && uid_tab[i].used) i++;
  if (i < sizeof uid_tab / sizeof uid_tab[0]) uid_tab[i].nonce = id.nonce, uid_tab[i].fd = fd, uid_tab[i].used = 1;
  pthread_mutex_unlock(&uid_lock);
  if (i == sizeof uid_tab / sizeof uid_tab[0]) {
    close(fd);
    return hn_err(ncclInvalidUsage, "ncclGetUniqueId: more than %zu unique ids not yet used by ncclCommInitRank",
                  sizeof uid_tab / sizeof uid_tab[0]);
  }
  memset(out, 0, sizeof *out);
  memcpy(out->internal, &id, sizeof id);
  if (hn_cfg()->log) hn_log("unique id: sockets, root listens on 127.0.0.1:%u", ntohs(id.port));
  return ncclSuccess;
}

/* The id's listener if this process created it (claimed: removed), else -1. */
static int claim_uid(uint64_t nonce) {
  int fd = -1;
  pthread_mutex_lock(&uid_lock);
  for (size_t i = 0; i < sizeof uid_tab / sizeof uid_tab[0]; i++)
    if (uid_tab[i].used && uid_tab[i].nonce == nonce) {
      fd = uid_tab[i].fd;
      uid_tab[i].used = 0;
    }
  pthread_mutex_unlock(&uid_lock);
  return fd;
}

static ncclResult_t alloc_fds(ncclComm_t c) {
  size_t n = (size_t)HN_NCLASS * (size_t)c->nranks;
  c->sfd = malloc(n * sizeof *c->sfd);
  c->rfd = malloc(n * sizeof *c->rfd);
  if (!c->sfd || !c->rfd) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  for (size_t i = 0; i < n; i++) c->sfd[i] = c->rfd[i] = -1;
  return ncclSuccess;
}

typedef struct { uint64_t nonce; int32_t rank, cls; } hello;

/* Connect the mesh of c (rank, nranks, nonce set) given every member's
 * listening port; lfd is ours. */
static ncclResult_t mesh(ncclComm_t c, int lfd, const uint16_t *ports) {
  int n = c->nranks, me = c->rank;
  c->sock = 1;
  HN_CHECK(alloc_fds(c));
  for (int cls = 0; cls < HN_NCLASS; cls++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return sys_err("socketpair");
    c->sfd[cls * n + me] = sv[0];
    c->rfd[cls * n + me] = sv[1];
    for (int j = 0; j < me; j++) {
      int s;
      HN_CHECK(connect_to(htonl(INADDR_LOOPBACK), ports[j], &s));
      c->sfd[cls * n + j] = c->rfd[cls * n + j] = s;
      hello h = {c->nonce, me, cls};
      HN_CHECK(io_all(s, &h, sizeof h, 1));
    }
  }
  for (int k = 0; k < (n - 1 - me) * HN_NCLASS; k++) {
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) return sys_err("accept");
    hello h;
    ncclResult_t r = io_all(s, &h, sizeof h, 0);
    if (r == ncclSuccess && (h.nonce != c->nonce || h.rank <= me || h.rank >= n || h.cls < 0 ||
                             h.cls >= HN_NCLASS || c->sfd[h.cls * n + h.rank] >= 0))
      r = hn_err(ncclInternalError, "hostnccl: unexpected connection (rank %d class %d) while connecting "
                 "communicator ranks", (int)h.rank, (int)h.cls);
    if (r != ncclSuccess) { close(s); return r; }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->sfd[h.cls * n + h.rank] = c->rfd[h.cls * n + h.rank] = s;
  }
  for (int i = 0; i < HN_NCLASS * n; i++) {
    fcntl(c->sfd[i], F_SETFL, fcntl(c->sfd[i], F_GETFL) | O_NONBLOCK);
    if (c->rfd[i] != c->sfd[i]) fcntl(c->rfd[i], F_SETFL, fcntl(c->rfd[i], F_GETFL) | O_NONBLOCK);
  }
  return ncclSuccess;
}

typedef struct { uint64_t nonce; int32_t rank, nranks; uint16_t port, pad; } join_msg;

/* Root: accept the other members on the id's listener, answer the table. */
static ncclResult_t root_gather(int ufd, const join_msg *mine, uint16_t *ports) {
  int n = mine->nranks, status = 0;
  ncclResult_t res = ncclSuccess;
  int *fds = malloc((size_t)n * sizeof *fds);
  char *seen = calloc((size_t)n, 1);
  if (!fds || !seen) { res = hn_err(ncclSystemError, "hostnccl: out of host memory"); goto out; }
  ports[mine->rank] = mine->port;
  seen[mine->rank] = 1;
  int k;
  for (k = 0; k < n - 1 && res == ncclSuccess; k++) {
    join_msg m;
    fds[k] = accept4(ufd, NULL, NULL, SOCK_CLOEXEC);
    if (fds[k] < 0) { res = sys_err("accept"); break; }
    res = io_all(fds[k], &m, sizeof m, 0);
    if (res != ncclSuccess) { k++; break; }
    if (m.nonce != mine->nonce || m.nranks != n || m.rank < 0 || m.rank >= n || seen[m.rank]) status = 1;
    else seen[m.rank] = 1, ports[m.rank] = m.port;
  }
  int32_t st = status;
  for (int i = 0; i < k && res == ncclSuccess; i++) {
    res = io_all(fds[i], &st, sizeof st, 1);
    if (res == ncclSuccess && !status) res = io_all(fds[i], ports, (size_t)n * sizeof *ports, 1);
  }
  for (int i = 0; i < k; i++) if (fds[i] >= 0) close(fds[i]);
  if (res == ncclSuccess && status)
    res = hn_err(ncclInvalidArgument, "ncclCommInitRank: members disagree on nranks or hold the same rank");
out:
  free(fds);
  free(seen);
  return res;
}

static ncclResult_t member_join(const sock_uid *id, const join_msg *mine, uint16_t *ports) {
  int s;
  HN_CHECK(connect_to(id->addr, id->port, &s));
  int32_t st = 0;
  ncclResult_t res = io_all(s, (void *)mine, sizeof *mine, 1);
  if (res == ncclSuccess) res = io_all(s, &st, sizeof st, 0);
  if (res == ncclSuccess && !st) res = io_all(s, ports, (size_t)mine->nranks * sizeof *ports, 0);
  close(s);
  if (res == ncclSuccess && st)
    res = hn_err(ncclInvalidArgument, "ncclCommInitRank: members disagree on nranks or hold the same rank");
  return res;
}

ncclResult_t hn_sock_init(ncclComm_t c, const ncclUniqueId *uid, int nranks, int rank) {
  sock_uid id;
  memcpy(&id, uid->internal, sizeof id);
  c->rank = rank;
  c->nranks = nranks;
  c->nonce = id.nonce;
  int lfd = -1, ufd = claim_uid(id.nonce);
  uint16_t *ports = malloc((size_t)nranks * sizeof *ports);
  ncclResult_t res = ports ? ncclSuccess : hn_err(ncclSystemError, "hostnccl: out of host memory");
  join_msg mine = {id.nonce, rank, nranks, 0, 0};
  if (res == ncclSuccess) res = listen_any(&lfd, &mine.port);
  if (res == ncclSuccess) res = ufd >= 0 ? root_gather(ufd, &mine, ports) : member_join(&id, &mine, ports);
  if (ufd >= 0) close(ufd);
  if (res == ncclSuccess) res = mesh(c, lfd, ports);
  if (lfd >= 0) close(lfd);
  free(ports);
  c->sock = 1; /* the fds, if any, are closed with the comm */
  return res;
}

typedef struct { int32_t color, key; uint16_t port, pad; } split_rec;

ncclResult_t hn_sock_split(ncclComm_t parent, int color, int key, ncclComm_t child) {
  int n = parent->nranks, me = parent->rank, lfd = -1;
  split_rec *all = calloc((size_t)n, sizeof *all);
  uint16_t *ports = calloc((size_t)n, sizeof *ports);
  if (!all || !ports) {
    free(all);
    free(ports);
    return hn_err(ncclSystemError, "hostnccl: out of host memory");
  }
  ncclResult_t res = ncclSuccess;
  all[me].color = child ? color : -1;
  all[me].key = key;
  if (res == ncclSuccess && child) res = listen_any(&lfd, &all[me].port);
  /* Ring all-gather of the records (every rank takes part, even on failure,
   * so that the others are not left waiting). */
  for (int s = 0; s < n - 1; s++) {
    int send = (me - s + n) % n, recv = (me - s - 1 + n) % n;
    ncclResult_t r = hn_sendrecv(parent, &all[send], sizeof *all, (me + 1) % n, &all[recv], sizeof *all,
                                 (me - 1 + n) % n, HN_TAG_COLL);
    if (res == ncclSuccess) res = r;
    if (r != ncclSuccess) break;
  }
  parent->nsplit++;
  if (res == ncclSuccess && child) {
    int m = 0, myr = 0;
    for (int pass = 0; pass < 2; pass++) /* pass 0: count and my position */
      for (int i = 0; i < n; i++) {
        if (all[i].color != color) continue;
        int pos = 0;
        for (int j = 0; j < n; j++)
          if (all[j].color == color && (all[j].key < all[i].key || (all[j].key == all[i].key && j < i))) pos++;
        if (pass == 0) { m++; if (i == me) myr = pos; }
        else ports[pos] = all[i].port;
      }
    child->rank = myr;
    child->nranks = m;
    child->nonce = parent->nonce * 0x9e3779b97f4a7c15ull + parent->nsplit * 0x100000001b3ull + (uint64_t)color;
    res = mesh(child, lfd, ports);
  }
  if (child) child->sock = 1;
  if (lfd >= 0) close(lfd);
  free(all);
  free(ports);
  return res;
}

void hn_sock_close(ncclComm_t c) {
  for (int i = 0; c->sfd && i < HN_NCLASS * c->nranks; i++) {
    if (c->sfd[i] >= 0) close(c->sfd[i]);
    if (c->rfd[i] >= 0 && c->rfd[i] != c->sfd[i]) close(c->rfd[i]);
  }
  free(c->sfd);
  free(c->rfd);
  c->sfd = c->rfd = NULL;
}

int hn_sock_progress(hn_req *r) {
  while (r->done < r->len) {
    ssize_t k = r->is_send ? send(r->fd, r->buf + r->done, r->len - r->done, MSG_NOSIGNAL | MSG_DONTWAIT)
                           : recv(r->fd, r->buf + r->done, r->len - r->done, MSG_DONTWAIT);
    if (k > 0) { r->done += (size_t)k; continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (k == 0) hn_err(ncclSystemError, "hostnccl: a peer of communicator %p closed its connection", (void *)r->comm);
    else hn_err(ncclSystemError, "hostnccl: %s on communicator %p failed: %s", r->is_send ? "send" : "recv",
                (void *)r->comm, strerror(errno));
    return -1;
  }
  r->fd = -1;
  return 1;
}

void hn_sock_poll(hn_req *const *heads, int n, int timeout_ms) {
  struct pollfd p[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = heads[i]->fd, .events = heads[i]->is_send ? POLLOUT : POLLIN};
  poll(p, (nfds_t)n, timeout_ms);
}

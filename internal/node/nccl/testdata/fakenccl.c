/* A stand-in for libnccl.so.2 with the same C signatures as nccl.h, for
 * the bindings' tests on machines without NCCL. It does no
 * communication: each call records its arguments in the communicator (or
 * in globals) so that a test can read back what arrived where, which
 * checks the bindings' argument order and the by-value passing of the
 * 128-byte ncclUniqueId against the compiler's own ABI.
 *
 * Built by nccl_test.go with: cc -shared -fPIC -O1 -o libfakenccl.so fakenccl.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
typedef struct fakeComm {
  int nranks, rank;
  unsigned char id[128];
  uint64_t last[8]; /* the arguments of the last collective */
} *ncclComm_t;

static char lastError[256];
static int envNVLS = -2; /* NCCL_NVLS_ENABLE as read at the first init */

ncclResult_t ncclGetVersion(int *v) { *v = 22803; return 0; }

/* The id every test draws: byte i is (i*7+1) mod 256. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 1);
  return 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (envNVLS == -2) {
    const char *e = getenv("NCCL_NVLS_ENABLE");
    envNVLS = e ? atoi(e) : -1;
  }
  if (rank < 0 || rank >= nranks) {
    snprintf(lastError, sizeof lastError, "fake: rank %d is not below nranks %d", rank, nranks);
    return 4; /* ncclInvalidArgument */
  }
  ncclComm_t c = calloc(1, sizeof *c);
  c->nranks = nranks;
  c->rank = rank;
  memcpy(c->id, id.internal, 128);
  *comm = c;
  return 0;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < ndev; i++) {
    ncclCommInitRank(&comms[i], ndev, id, i);
    comms[i]->last[0] = (uint64_t)devlist[i];
  }
  return 0;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) { free(c); return 0; }
ncclResult_t ncclCommAbort(ncclComm_t c) { free(c); return 0; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
  *e = c->nranks == 99 ? 6 : 0; /* a clique of 99 plays a remote error */
  if (*e) snprintf(lastError, sizeof lastError, "fake: peer vanished");
  return 0;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *n) { *n = c->nranks; return 0; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) { *r = c->rank; return 0; }

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case 4: return "invalid argument";
  case 5: return "invalid usage";
  case 6: return "remote process exited or there was a network error";
  default: return "unknown result code";
  }
}
const char *ncclGetLastError(ncclComm_t c) { (void)c; return lastError; }

static void rec(ncclComm_t c, uint64_t a, uint64_t b, uint64_t d, uint64_t e, uint64_t f, uint64_t g) {
  uint64_t v[8] = {a, b, d, e, f, g, 0, 0};
  memcpy(c->last, v, sizeof v);
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  rec(c, (uintptr_t)s, (uintptr_t)r, n, t, op, (uintptr_t)st);
  return 0;
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) {
  rec(c, (uintptr_t)s, (uintptr_t)r, n, t, 0, (uintptr_t)st);
  return 0;
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  rec(c, (uintptr_t)s, (uintptr_t)r, n, t, op, (uintptr_t)st);
  return 0;
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, void *st) {
  rec(c, (uintptr_t)s, (uintptr_t)r, n, t, root, (uintptr_t)st);
  return 0;
}
ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, void *st) {
  rec(c, (uintptr_t)s, 0, n, t, peer, (uintptr_t)st);
  return 0;
}
ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, void *st) {
  rec(c, 0, (uintptr_t)r, n, t, peer, (uintptr_t)st);
  return 0;
}
static int depth;
ncclResult_t ncclGroupStart(void) { depth++; return 0; }
ncclResult_t ncclGroupEnd(void) {
  if (depth == 0) {
    snprintf(lastError, sizeof lastError, "fake: ncclGroupEnd without ncclGroupStart");
    return 5; /* ncclInvalidUsage */
  }
  depth--;
  return 0;
}

/* Test hooks, not part of NCCL. */
void fakeLastArgs(ncclComm_t c, uint64_t out[8]) { memcpy(out, c->last, 8 * sizeof(uint64_t)); }
void fakeCommID(ncclComm_t c, unsigned char out[128]) { memcpy(out, c->id, 128); }
int fakeEnvNVLS(void) { return envNVLS; }

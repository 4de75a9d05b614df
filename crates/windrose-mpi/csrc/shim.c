/* The MPI side of windrose-mpi: the only code that sees the MPI library's types.
 *
 * Compiled once per ABI (Open MPI's handles are pointers, MPICH's are ints) by build.rs with
 * that MPI's compiler wrapper. The exported MPI_Init, MPI_Init_thread, MPI_Finalize, MPI_Bcast
 * and MPI_Bcast_c are Rust trampolines (src/intercept.rs: a cdylib exports only Rust's
 * symbols) that call the wr_MPI_* functions here. These decide which broadcasts windrose takes
 * and hand the Rust core an ABI-neutral transport: opaque handles and function pointers for
 * isend/test/probe/recv on a private duplicate of each communicator. */
#include <mpi.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Must match `Transport` in src/ffi.rs. */
typedef struct {
    void *ctx;
    int (*isend)(void *ctx, const void *head, size_t len, const void *payload,
                 size_t payload_len, int dest, void **req);
    int (*test)(void *req, int *done);
    int (*probe)(void *ctx, int *flag, int *source, size_t *len);
    int (*recv)(void *ctx, void *buf, size_t len);
    int (*irecv_payload)(void *ctx, void *buf, size_t len, int source, void **req);
    int (*test_payload)(void *req, size_t len, int *done);
} wr_transport;

/* The Rust core (src/ffi.rs). */
void *windrose_group_new(int rank, int size, const int *hosts, const wr_transport *t,
                         unsigned long long world_plan);
int windrose_group_bcast(void *group, void *buf, size_t len, int root);
int windrose_group_progress(void *group);
int windrose_group_quiescent(void *group);
void windrose_group_free(void *group);
int windrose_check_settings(void);
int windrose_probe_rounds(int n);
int windrose_probe_partner(int n, int round, int me);
int windrose_sites(int n, const double *rtt, const int *leaders, int log, int *out);
int windrose_plan_summary(char *buf, size_t len);

/* Every frame's head on the private communicator carries this tag; a large payload follows
 * its head as a second message on WR_PAYLOAD_TAG, sent from the payload's own buffer (a
 * sender's messages on one tag are received in order, so the receiver posts the payload's
 * receive from the head's sender once it has the head, in the order of that sender's heads). */
#define WR_TAG 7717
#define WR_PAYLOAD_TAG 7718
/* The host leaders' round-trip probes at MPI_Init (on a private duplicate of MPI_COMM_WORLD). */
#define WR_PROBE_TAG 7719
/* Round trips each leader times towards each partner (the pair's is the smallest of both sides'). */
#define WR_PROBES 4

/* One communicator windrose broadcasts on. */
typedef struct wr_comm {
    MPI_Comm dup;          /* private duplicate: our frames never match the user's receives */
    MPI_Comm net;          /* where windrose's frames go: dup, or the host leaders' part of it */
    MPI_Comm shm;          /* WINDROSE_MPI_TOPOLOGY=hosts: this rank's host (else MPI_COMM_NULL) */
    int *hosts;            /* hosts mode: per rank, its host's leader (the lowest rank there) */
    int *leader_index;     /* hosts mode: per rank, its leader's rank in `net` */
    void *group;           /* the Rust side (a Host and its driver); NULL off the leaders */
    wr_transport transport;
    MPI_Message pending;   /* the message the last probe matched */
    int has_pending;
    int dead;              /* released at MPI_Finalize; the attribute may outlive it */
    int orphan;            /* the user freed the communicator; released once quiescent */
    struct wr_comm *next;
} wr_comm;

static int wr_enabled = 0;
static size_t wr_threshold = 256 * 1024;
static int wr_keyval = MPI_KEYVAL_INVALID;
static int wr_stats = 0;
/* WINDROSE_MPI_TOPOLOGY=hosts: windrose between one leader per host, PMPI_Bcast inside each. */
static int wr_topology_hosts = 0;
/* Hosts mode: the most hosts a communicator spanned (printed with the stats). */
static int wr_max_hosts = 0;
/* Hosts mode: per rank of MPI_COMM_WORLD, the site of its host (from the leaders' round trips
 * at MPI_Init, src/sites.rs); NULL before, or when the measurement could not run. */
static int *wr_world_site = NULL;
static int wr_world_size = 0;
/* The plan every rank agreed at MPI_Init (wr_agree): a digest of whether windrose runs, the
 * threshold, the topology and the sites. Each group's plan version adds its members' hosts
 * (src/driver.rs plan_version) and goes before every frame; ranks of two versions refuse each
 * other's frames instead of mixing two plans. */
static unsigned long long wr_world_plan = 0;
/* Every live group, for MPI_Finalize. The lock guards only the list: holding it across a
 * collective could deadlock two threads creating groups on different communicators. */
static wr_comm *wr_comms = NULL;
static pthread_mutex_t wr_comms_lock = PTHREAD_MUTEX_INITIALIZER;
/* Updated atomically: under MPI_THREAD_MULTIPLE broadcasts on different communicators may
 * run at once. */
static unsigned long long wr_windrose_calls, wr_windrose_bytes, wr_fallback_calls;
/* Nonblocking and persistent broadcasts, forwarded to PMPI (counted so tests see the shim
 * took them). */
static unsigned long long wr_passthrough_calls;
#define WR_COUNT(c, n) __atomic_fetch_add(&(c), (n), __ATOMIC_RELAXED)

/* Two requests: the head's and the payload's (MPI_REQUEST_NULL without one). */
static int wr_isend(void *ctx, const void *head, size_t len, const void *payload,
                    size_t payload_len, int dest, void **req) {
    wr_comm *c = ctx;
    if (len > INT_MAX || payload_len > INT_MAX) return MPI_ERR_COUNT;
    MPI_Request *r = malloc(2 * sizeof *r);
    if (!r) return MPI_ERR_NO_MEM;
    r[1] = MPI_REQUEST_NULL;
    int rc = PMPI_Isend(head, (int)len, MPI_BYTE, dest, WR_TAG, c->net, &r[0]);
    if (rc != MPI_SUCCESS) { free(r); return rc; }
    if (payload_len > 0) {
        rc = PMPI_Isend(payload, (int)payload_len, MPI_BYTE, dest, WR_PAYLOAD_TAG, c->net, &r[1]);
        if (rc != MPI_SUCCESS) {
            /* The head is out: let it complete before its buffer may go. */
            PMPI_Wait(&r[0], MPI_STATUS_IGNORE);
            free(r);
            return rc;
        }
    }
    *req = r;
    return MPI_SUCCESS;
}

/* Frees the requests once both completed. */
static int wr_test(void *req, int *done) {
    MPI_Request *r = req;
    MPI_Status st[2]; /* not MPI_STATUSES_IGNORE: MPICH's header makes GCC warn about it */
    int rc = PMPI_Testall(2, r, done, st);
    if (rc == MPI_SUCCESS && *done) free(r);
    return rc;
}

/* Matched probe: the message is taken off the queue, so a later receive cannot get another. */
static int wr_probe(void *ctx, int *flag, int *source, size_t *len) {
    wr_comm *c = ctx;
    MPI_Status st;
    int count = 0;
    if (c->has_pending) return MPI_ERR_OTHER; /* the core receives what it probed first */
    int rc = PMPI_Improbe(MPI_ANY_SOURCE, WR_TAG, c->net, flag, &c->pending, &st);
    if (rc != MPI_SUCCESS || !*flag) return rc;
    rc = PMPI_Get_count(&st, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS) return rc;
    c->has_pending = 1;
    *source = st.MPI_SOURCE;
    *len = (size_t)count;
    return MPI_SUCCESS;
}

static int wr_recv(void *ctx, void *buf, size_t len) {
    wr_comm *c = ctx;
    if (!c->has_pending) return MPI_ERR_OTHER;
    c->has_pending = 0;
    return PMPI_Mrecv(buf, (int)len, MPI_BYTE, &c->pending, MPI_STATUS_IGNORE);
}

/* Starts receiving the next payload from `source` (MPI matches a sender's messages on one tag,
 * and the receives posted for one source, in order), so a rank takes payloads from several
 * peers at once instead of one blocking receive at a time. */
static int wr_irecv_payload(void *ctx, void *buf, size_t len, int source, void **req) {
    wr_comm *c = ctx;
    if (len > INT_MAX) return MPI_ERR_COUNT;
    MPI_Request *r = malloc(sizeof *r);
    if (!r) return MPI_ERR_NO_MEM;
    int rc = PMPI_Irecv(buf, (int)len, MPI_BYTE, source, WR_PAYLOAD_TAG, c->net, r);
    if (rc != MPI_SUCCESS) { free(r); return rc; }
    *req = r;
    return MPI_SUCCESS;
}

/* Frees the request once done. A payload of another length than `len` is an error
 * (MPI_ERR_TRUNCATE when longer, MPI_ERR_COUNT when shorter). */
static int wr_test_payload(void *req, size_t len, int *done) {
    MPI_Request *r = req;
    MPI_Status st;
    int count = 0;
    int rc = PMPI_Test(r, done, &st);
    if (rc != MPI_SUCCESS || !*done) return rc;
    free(r);
    rc = PMPI_Get_count(&st, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS) return rc;
    return (size_t)count == len ? MPI_SUCCESS : MPI_ERR_COUNT;
}

/* Frees the group and its duplicate, and unlinks it; the list lock is held. An orphan's
 * memory goes too (its attribute is gone), else the attribute's delete callback frees it. */
static void wr_release_locked(wr_comm *c) {
    if (c->dead) return;
    c->dead = 1;
    windrose_group_free(c->group);
    c->group = NULL;
    if (c->net != c->dup && c->net != MPI_COMM_NULL) PMPI_Comm_free(&c->net);
    if (c->shm != MPI_COMM_NULL) PMPI_Comm_free(&c->shm);
    free(c->hosts);
    free(c->leader_index);
    c->hosts = c->leader_index = NULL;
    PMPI_Comm_free(&c->dup);
    wr_comm **p = &wr_comms;
    while (*p && *p != c) p = &(*p)->next;
    if (*p) *p = c->next;
    if (c->orphan) free(c);
}

/* Drives every group until none owes a peer anything: a rank cannot leave while another
 * waits for its session messages (Done, Close) on any communicator. */
static void wr_drain_all(void) {
    for (;;) {
        int all = 1;
        for (wr_comm *c = wr_comms; c; c = c->next) {
            if (!c->group) continue; /* not a host leader: nothing of windrose's */
            if (windrose_group_progress(c->group) != 0) continue; /* reported by the core */
            if (!windrose_group_quiescent(c->group)) all = 0;
        }
        if (all) return;
    }
}

/* One round of progress for the groups of freed communicators, releasing those that owe
 * nothing. Called at every windrose broadcast: never blocks. */
static void wr_reap(void) {
    if (pthread_mutex_trylock(&wr_comms_lock) != 0) return; /* another thread is at it */
    wr_comm *c = wr_comms;
    while (c) {
        wr_comm *next = c->next;
        if (c->orphan && (!c->group || (windrose_group_progress(c->group) == 0 &&
                                         windrose_group_quiescent(c->group))))
            wr_release_locked(c);
        c = next;
    }
    pthread_mutex_unlock(&wr_comms_lock);
}

/* The user freed the communicator. Its group may still owe peers session messages, and a
 * peer may only get to them after this rank's next user-level message to it (MPI_Comm_free
 * does not synchronise): waiting here could deadlock. The group is kept and released when
 * quiescent (wr_reap), at the latest at MPI_Finalize. */
static int wr_delete(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm; (void)keyval; (void)extra;
    wr_comm *c = attr;
    pthread_mutex_lock(&wr_comms_lock);
    if (c->dead) free(c);
    else c->orphan = 1;
    pthread_mutex_unlock(&wr_comms_lock);
    return MPI_SUCCESS;
}

/* The host of `rank` in `comm`: its shared-memory communicator in *shm (ranks in `comm`'s
 * order) and the lowest rank of `comm` there, which leads the host. */
static int wr_host_leader(MPI_Comm comm, int rank, MPI_Comm *shm) {
    int leader = rank;
    PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, shm);
    PMPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, *shm);
    return leader;
}

/* At MPI_Init, inside collectives every rank must reach: a rank cannot just skip its part. */
static void wr_out_of_memory(const char *what) {
    fprintf(stderr, "windrose-mpi: out of memory %s at MPI_Init\n", what);
    PMPI_Abort(MPI_COMM_WORLD, 1);
}

/* Tests only (WINDROSE_MPI_TEST_PROBE_DELAY=US:SPLIT): a leader answers a probe from a leader
 * on the other side of world rank SPLIT US microseconds late, emulating two sites on one
 * machine. */
static void wr_test_probe_delay(int me, int peer) {
    const char *v = getenv("WINDROSE_MPI_TEST_PROBE_DELAY");
    unsigned long us = 0;
    int split = 0;
    if (!v || sscanf(v, "%lu:%d", &us, &split) != 2) return;
    if ((me < split) == (peer < split)) return;
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0) {}
}

/* A one-byte receive of a probe that yields the core while it waits: MPICH's blocking receive
 * polls, and on a machine with more ranks than cores the partner then waits for the poller's
 * time slice (loopback round trips of 16 ms, the best of 8, were seen that way). */
static void wr_probe_recv(char *b, int peer, MPI_Comm net) {
    MPI_Request req;
    int done = 0;
    PMPI_Irecv(b, 1, MPI_BYTE, peer, WR_PROBE_TAG, net, &req);
    for (;;) {
        PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        sched_yield();
    }
}

/* The smallest of WR_PROBES round trips from this leader to `peer` and back (seconds), each
 * side timing its own pings: the lower rank pings first, then answers. */
static double wr_probe_pair(MPI_Comm net, int me, int peer, const int *world_rank) {
    double best = -1;
    char b = 0;
    for (int turn = 0; turn < 2; turn++) {
        int pinging = (turn == 0) == (me < peer);
        for (int k = 0; k < WR_PROBES; k++) {
            if (pinging) {
                double t0 = PMPI_Wtime();
                PMPI_Send(&b, 1, MPI_BYTE, peer, WR_PROBE_TAG, net);
                wr_probe_recv(&b, peer, net);
                double rtt = PMPI_Wtime() - t0;
                if (best < 0 || rtt < best) best = rtt;
            } else {
                wr_probe_recv(&b, peer, net);
                wr_test_probe_delay(world_rank[me], world_rank[peer]);
                PMPI_Send(&b, 1, MPI_BYTE, peer, WR_PROBE_TAG, net);
            }
        }
    }
    return best;
}

/* Hosts mode, at MPI_Init: the host leaders probe each other (pairs in parallel, each pair
 * once), the first leader clusters the round trips into sites (src/sites.rs; printed with
 * WINDROSE_MPI_STATS=path) and hands them to every leader, each leader to its host: every
 * rank ends with the same wr_world_site. */
static void wr_measure_sites(void) {
    MPI_Comm world, shm, net;
    int rank = 0, size = 0, site = 0;
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &world) != MPI_SUCCESS) return;
    PMPI_Comm_rank(world, &rank);
    PMPI_Comm_size(world, &size);
    int leader = wr_host_leader(world, rank, &shm);
    PMPI_Comm_split(world, leader == rank ? 0 : MPI_UNDEFINED, rank, &net);
    if (net != MPI_COMM_NULL) {
        int n = 0, me = 0, ok = 1;
        PMPI_Comm_size(net, &n);
        PMPI_Comm_rank(net, &me);
        double *row = calloc((size_t)n, sizeof *row);
        double *all = me == 0 ? calloc((size_t)n * (size_t)n, sizeof *all) : NULL;
        int *leaders = malloc(sizeof(int) * (size_t)n), *sites = malloc(sizeof(int) * (size_t)n);
        if (!row || !leaders || !sites || (me == 0 && !all)) wr_out_of_memory("measuring sites");
        PMPI_Allgather(&rank, 1, MPI_INT, leaders, 1, MPI_INT, net);
        for (int round = 0; round < windrose_probe_rounds(n); round++) {
            int p = windrose_probe_partner(n, round, me);
            if (p >= 0) row[p] = wr_probe_pair(net, me, p, leaders);
        }
        PMPI_Gather(row, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, net);
        if (me == 0) ok = windrose_sites(n, all, leaders, wr_stats, sites) == 0;
        if (!ok) {
            for (int k = 0; k < n; k++) sites[k] = k; /* the core said why: each host alone */
        }
        PMPI_Bcast(sites, n, MPI_INT, 0, net);
        site = sites[me];
        free(row); free(all); free(leaders); free(sites);
        PMPI_Comm_free(&net);
    }
    PMPI_Bcast(&site, 1, MPI_INT, 0, shm); /* the leader is the host's rank 0 */
    int *all_sites = malloc(sizeof(int) * (size_t)size);
    if (!all_sites) wr_out_of_memory("measuring sites");
    PMPI_Allgather(&site, 1, MPI_INT, all_sites, 1, MPI_INT, world);
    wr_world_site = all_sites;
    wr_world_size = size;
    PMPI_Comm_free(&shm);
    PMPI_Comm_free(&world);
}

/* FNV-1a over one 64-bit value, for the plan's digest. */
static unsigned long long wr_digest(unsigned long long h, unsigned long long v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Every rank must take the same path for a call, and in hosts mode the same steps: the
 * settings that decide them (WINDROSE_MPI, WINDROSE_MPI_THRESHOLD, WINDROSE_MPI_TOPOLOGY) are
 * rank 0's on every rank. A launch that sets them differently per rank (an MPMD command line,
 * a rank's own environment) would otherwise make ranks disagree: one in PMPI_Bcast, another in
 * windrose's. A rank whose own settings differ says so and uses rank 0's. (The others only
 * shape what a root sends, which travels with its frames.) */
static void wr_agree(void) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long long mine[3] = { wr_enabled, (long long)wr_threshold, wr_topology_hosts };
    long long zero[3] = { mine[0], mine[1], mine[2] };
    PMPI_Bcast(zero, 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    static const char *what[3] = { "WINDROSE_MPI (1: on, 0: off)", "WINDROSE_MPI_THRESHOLD (bytes)",
                                   "WINDROSE_MPI_TOPOLOGY (1: hosts, 0: flat)" };
    for (int k = 0; k < 3; k++) {
        if (mine[k] != zero[k]) {
            fprintf(stderr, "windrose-mpi: rank %d: %s is %lld here and %lld on rank 0; every rank "
                            "uses rank 0's, so all take the same path\n",
                    rank, what[k], mine[k], zero[k]);
        }
    }
    wr_enabled = (int)zero[0];
    wr_threshold = (size_t)zero[1];
    wr_topology_hosts = (int)zero[2];
}

/* The agreed plan's digest (after wr_agree and the sites). WINDROSE_MPI_TEST_PLAN_SKEW=R, for
 * tests only: world rank R's plan differs from the others', as a rank that adopted a
 * re-measured plan alone would. */
static void wr_plan_digest(void) {
    unsigned long long h = 0xcbf29ce484222325ULL;
    h = wr_digest(h, (unsigned long long)wr_enabled);
    h = wr_digest(h, (unsigned long long)wr_threshold);
    h = wr_digest(h, (unsigned long long)wr_topology_hosts);
    h = wr_digest(h, (unsigned long long)wr_world_size);
    for (int w = 0; wr_world_site && w < wr_world_size; w++)
        h = wr_digest(h, (unsigned long long)(unsigned)wr_world_site[w]);
    const char *skew = getenv("WINDROSE_MPI_TEST_PLAN_SKEW");
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (skew && *skew && atoi(skew) == rank) h ^= 1;
    wr_world_plan = h;
}

/* Reads the settings and agrees them with rank 0 (wr_agree); MPI_ERR_ARG (raised on
 * MPI_COMM_WORLD, fatal by default) when one of the core's (WINDROSE_MPI_TREE, _PROBE_MS,
 * _SEGMENT, _SITE_MS) is bad: the core printed which. */
static int wr_setup(void) {
    const char *off = getenv("WINDROSE_MPI");
    wr_enabled = !(off && strcmp(off, "off") == 0);
    const char *th = getenv("WINDROSE_MPI_THRESHOLD");
    if (th && *th) {
        char *end = NULL;
        unsigned long long v = strtoull(th, &end, 10);
        if (end && *end == '\0') {
            wr_threshold = (size_t)v;
        } else {
            fprintf(stderr, "windrose-mpi: WINDROSE_MPI_THRESHOLD=%s is not a byte count; "
                            "keeping %zu\n", th, wr_threshold);
        }
    }
    const char *topo = getenv("WINDROSE_MPI_TOPOLOGY");
    if (topo && *topo) {
        if (strcmp(topo, "hosts") == 0) {
            wr_topology_hosts = 1;
        } else if (wr_enabled && strcmp(topo, "flat") != 0) {
            fprintf(stderr, "windrose-mpi: WINDROSE_MPI_TOPOLOGY=%s: expected flat or hosts\n", topo);
            PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_ARG);
            return MPI_ERR_ARG;
        }
    }
    const char *st = getenv("WINDROSE_MPI_STATS");
    wr_stats = st && strcmp(st, "path") == 0;
    wr_agree();
    if (wr_enabled && windrose_check_settings() != 0) {
        PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_ARG);
        return MPI_ERR_ARG;
    }
    /* Every rank, or none (a failed keyval would leave this rank on PMPI_Bcast alone). */
    int keyed = wr_enabled &&
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, wr_delete, &wr_keyval, NULL) == MPI_SUCCESS;
    if (wr_enabled) {
        int all = keyed;
        PMPI_Allreduce(&keyed, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (keyed) PMPI_Comm_free_keyval(&wr_keyval);
            wr_enabled = 0;
        }
    }
    if (wr_enabled && wr_topology_hosts) wr_measure_sites();
    wr_plan_digest();
    return MPI_SUCCESS;
}

int wr_MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) rc = wr_setup();
    return rc;
}

int wr_MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) rc = wr_setup();
    return rc;
}

int wr_MPI_Finalize(void) {
    if (wr_stats) {
        int rank = -1;
        char plans[256] = "plans 0 changed 0 last-plan none";
        PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
        windrose_plan_summary(plans, sizeof plans);
        /* The counters first, in the order the tests parse them; then what this rank planned
         * as a root (src/driver.rs, PlanTally). */
        fprintf(stderr, "windrose-mpi stats: rank %d windrose %llu calls %llu bytes fallback %llu calls "
                        "passthrough %llu calls hosts %d %s\n",
                rank, wr_windrose_calls, wr_windrose_bytes, wr_fallback_calls,
                wr_passthrough_calls, wr_max_hosts, plans);
    }
    wr_drain_all();
    pthread_mutex_lock(&wr_comms_lock);
    while (wr_comms) wr_release_locked(wr_comms);
    pthread_mutex_unlock(&wr_comms_lock);
    if (wr_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&wr_keyval);
    free(wr_world_site);
    wr_world_site = NULL;
    return PMPI_Finalize();
}

/* Hosts mode: in `ids`, per leader of `comm` (in rank order), the site of its host, which the
 * Host takes as its cluster; a leader outside MPI_COMM_WORLD (or without the measurement) is
 * its own site. */
static void wr_site_ids(MPI_Comm comm, int size, const int *hosts, int *ids) {
    int *ranks = malloc(sizeof(int) * (size_t)size), *world = malloc(sizeof(int) * (size_t)size);
    MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
    int ok = ranks && world && wr_world_site && PMPI_Comm_group(comm, &g) == MPI_SUCCESS &&
             PMPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS;
    if (ok) {
        for (int r = 0; r < size; r++) ranks[r] = r;
        ok = PMPI_Group_translate_ranks(g, size, ranks, wg, world) == MPI_SUCCESS;
    }
    for (int r = 0, k = 0; r < size; r++) {
        if (hosts[r] != r) continue;
        int w = ok ? world[r] : MPI_UNDEFINED;
        ids[k] = w >= 0 && w < wr_world_size ? wr_world_site[w] : wr_world_size + k;
        k++;
    }
    if (g != MPI_GROUP_NULL) PMPI_Group_free(&g);
    if (wg != MPI_GROUP_NULL) PMPI_Group_free(&wg);
    free(ranks);
    free(world);
}

/* The communicator's windrose state, created at its first windrose broadcast (a collective
 * step every member reaches at the same call, since the path depends only on shared
 * arguments). */
static wr_comm *wr_comm_of(MPI_Comm comm) {
    void *attr = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, wr_keyval, &attr, &found) == MPI_SUCCESS && found) return attr;
    wr_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    int rank, size;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    if (PMPI_Comm_dup(comm, &c->dup) != MPI_SUCCESS) { free(c); return NULL; }
    /* Which host each rank is on (named by the lowest rank there): the cost guess, and in
     * hosts mode the two levels. */
    MPI_Comm shm;
    int *hosts = malloc(sizeof(int) * (size_t)size);
    if (!hosts) { PMPI_Comm_free(&c->dup); free(c); return NULL; }
    int leader = wr_host_leader(c->dup, rank, &shm);
    PMPI_Allgather(&leader, 1, MPI_INT, hosts, 1, MPI_INT, c->dup);
    c->transport.ctx = c;
    c->transport.isend = wr_isend;
    c->transport.test = wr_test;
    c->transport.probe = wr_probe;
    c->transport.recv = wr_recv;
    c->transport.irecv_payload = wr_irecv_payload;
    c->transport.test_payload = wr_test_payload;
    c->shm = MPI_COMM_NULL;
    if (!wr_topology_hosts) {
        PMPI_Comm_free(&shm);
        c->net = c->dup;
        c->group = windrose_group_new(rank, size, hosts, &c->transport, wr_world_plan);
        free(hosts);
        if (!c->group) { PMPI_Comm_free(&c->dup); free(c); return NULL; }
    } else {
        /* Leaders, in rank order, form `net`; each host is a member there, its site its cluster. */
        int *index = malloc(sizeof(int) * (size_t)size);
        int *ids = malloc(sizeof(int) * (size_t)size);
        int nhosts = 0;
        if (!index || !ids) {
            free(index); free(ids); free(hosts); PMPI_Comm_free(&shm); PMPI_Comm_free(&c->dup);
            free(c);
            return NULL;
        }
        wr_site_ids(comm, size, hosts, ids);
        for (int r = 0; r < size; r++) nhosts += hosts[r] == r;
        for (int r = 0, k = 0; r < size; r++) {
            if (hosts[r] == r) index[r] = k++;
        }
        for (int r = 0; r < size; r++) index[r] = index[hosts[r]];
        c->shm = shm;
        c->hosts = hosts;
        c->leader_index = index;
        PMPI_Comm_split(c->dup, leader == rank ? 0 : MPI_UNDEFINED, rank, &c->net);
        c->group = NULL;
        if (leader == rank && nhosts > 1) {
            c->group = windrose_group_new(index[rank], nhosts, ids, &c->transport, wr_world_plan);
            if (!c->group) {
                free(ids);
                wr_release_locked(c); /* not linked yet: frees what it holds */
                free(c);
                return NULL;
            }
        }
        free(ids);
        pthread_mutex_lock(&wr_comms_lock);
        if (nhosts > wr_max_hosts) wr_max_hosts = nhosts;
        pthread_mutex_unlock(&wr_comms_lock);
    }
    pthread_mutex_lock(&wr_comms_lock);
    c->next = wr_comms;
    wr_comms = c;
    pthread_mutex_unlock(&wr_comms_lock);
    PMPI_Comm_set_attr(comm, wr_keyval, c);
    return c;
}

/* Bytes of `count` elements of `dt` when they are one contiguous block, else 0 with *ok = 0. */
static size_t wr_contiguous_bytes(MPI_Count count, MPI_Datatype dt, int *ok) {
    int size = 0;
    MPI_Aint lb, extent, true_lb, true_extent;
    *ok = 0;
    if (PMPI_Type_size(dt, &size) != MPI_SUCCESS) return 0;
    if (PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS) return 0;
    if (PMPI_Type_get_true_extent(dt, &true_lb, &true_extent) != MPI_SUCCESS) return 0;
    /* No holes inside an element nor between elements. */
    if (lb != 0 || true_lb != 0 || extent != size || true_extent != size) return 0;
    *ok = 1;
    return (size_t)size * (size_t)count;
}

/* True when this call goes through windrose. Depends only on arguments every rank shares
 * (count, datatype, the communicator), so every rank takes the same path. */
static int wr_takes(MPI_Count count, MPI_Datatype dt, MPI_Comm comm, size_t *bytes) {
    int inter = 0, size = 0, ok = 0;
    if (!wr_enabled || count <= 0) return 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return 0;
    if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size <= 2) return 0;
    *bytes = wr_contiguous_bytes(count, dt, &ok);
    return ok && *bytes > wr_threshold;
}

/* PMPI_Bcast of `bytes` bytes on a host's communicator, in pieces an int counts. */
static int wr_shm_bcast(char *buf, size_t bytes, int root, MPI_Comm shm) {
    for (size_t at = 0; at < bytes;) {
        size_t n = bytes - at < (1u << 30) ? bytes - at : (1u << 30);
        int rc = PMPI_Bcast(buf + at, (int)n, MPI_BYTE, root, shm);
        if (rc != MPI_SUCCESS) return rc;
        at += n;
    }
    return MPI_SUCCESS;
}

/* Hosts mode: the root's host gets the data from the root by PMPI_Bcast, the other leaders
 * from the root's leader by windrose, every other host from its leader by PMPI_Bcast. 0, or
 * an MPI error class. */
static int wr_bcast_hosts(wr_comm *c, void *buf, size_t bytes, int root, int rank) {
    int root_leader = c->hosts[root], my_leader = c->hosts[rank];
    if (my_leader == root_leader) {
        int shm_root = 0; /* the host's ranks are in rank order in `shm` */
        for (int r = 0; r < root; r++) shm_root += c->hosts[r] == root_leader;
        int rc = wr_shm_bcast(buf, bytes, shm_root, c->shm);
        if (rc != MPI_SUCCESS) return rc;
    }
    if (c->group) {
        int rc = windrose_group_bcast(c->group, buf, bytes, c->leader_index[root_leader]);
        if (rc != 0) return rc == 2 ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
    }
    if (my_leader != root_leader) return wr_shm_bcast(buf, bytes, 0, c->shm);
    return MPI_SUCCESS;
}

static int wr_bcast(void *buf, size_t bytes, int root, MPI_Comm comm) {
    wr_reap();
    wr_comm *c = wr_comm_of(comm);
    if (!c) return MPI_ERR_INTERN;
    int cls = MPI_SUCCESS;
    if (c->shm != MPI_COMM_NULL) {
        int rank = 0, size = 0;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Comm_size(comm, &size);
        cls = root < 0 || root >= size ? MPI_ERR_ROOT : wr_bcast_hosts(c, buf, bytes, root, rank);
    } else {
        int rc = windrose_group_bcast(c->group, buf, bytes, root);
        if (rc != 0) cls = rc == 2 ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
    }
    if (cls != MPI_SUCCESS) {
        /* The core printed why; the communicator's error handler decides what happens. */
        PMPI_Comm_call_errhandler(comm, cls);
        return cls;
    }
    WR_COUNT(wr_windrose_calls, 1);
    WR_COUNT(wr_windrose_bytes, bytes);
    return MPI_SUCCESS;
}

int wr_MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    size_t bytes = 0;
    if (!wr_takes(count, datatype, comm, &bytes)) {
        WR_COUNT(wr_fallback_calls, 1);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    return wr_bcast(buffer, bytes, root, comm);
}

#if MPI_VERSION >= 4
int wr_MPI_Bcast_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    size_t bytes = 0;
    if (!wr_takes(count, datatype, comm, &bytes)) {
        WR_COUNT(wr_fallback_calls, 1);
        return PMPI_Bcast_c(buffer, count, datatype, root, comm);
    }
    return wr_bcast(buffer, bytes, root, comm);
}
#endif

/* MPI_Ibcast and MPI_Bcast_init go to PMPI as they are: windrose's driver makes progress only
 * inside blocking calls, so it cannot own a request the program completes later. Intercepted
 * here so a later version can take them without changing how programs are launched. */
int wr_MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                  MPI_Request *request) {
    WR_COUNT(wr_passthrough_calls, 1);
    return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
}

#if MPI_VERSION >= 4
int wr_MPI_Bcast_init(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                      MPI_Info info, MPI_Request *request) {
    WR_COUNT(wr_passthrough_calls, 1);
    return PMPI_Bcast_init(buffer, count, datatype, root, comm, info, request);
}
#endif

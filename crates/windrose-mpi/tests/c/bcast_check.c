/* An unmodified MPI program (it knows nothing of windrose): broadcasts of every kind the shim
 * must get right, each checked byte for byte against the pattern the root wrote and against
 * PMPI_Bcast of the same data. Exits non-zero (MPI_Abort) at the first difference.
 *
 * Usage: bcast_check THRESHOLD MAX_BYTES REPEATS
 *        bcast_check truncate BYTES   (see truncate_check)
 *        bcast_check free BYTES       (see free_check)
 *        bcast_check nonblocking BYTES (see nonblocking_check)
 *        bcast_check kill BYTES       (see kill_check)
 * THRESHOLD is the shim's WINDROSE_MPI_THRESHOLD (-1: shim off), used only to print how many
 * calls should have taken windrose's path ("expect-windrose RANK N"). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static long long threshold;
static unsigned long long expect_windrose;
static unsigned long long calls;
/* Calls on each communicator: the pattern's call index, the same at every member. */
static unsigned long long world_calls, part_calls, dup_calls;
static MPI_Comm part_comm = MPI_COMM_NULL, dup_comm = MPI_COMM_NULL;

static unsigned long long next_index(MPI_Comm comm) {
    calls++;
    if (comm == part_comm) return part_calls++;
    if (comm == dup_comm) return dup_calls++;
    return world_calls++;
}

static unsigned char pattern(int root, unsigned long long k, size_t i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)root << 40) ^ (k * 0xD1B54A32D192ED03ull);
    x ^= x >> 29;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static void fail(MPI_Comm comm, const char *what, int root, unsigned long long k, size_t at) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "MISMATCH rank %d: %s, root %d, call %llu, byte %zu\n", rank, what, root, k, at);
    (void)comm;
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* One broadcast of `count` elements of `dt` (true extent `span` bytes, `contig` when it has no
 * holes) from `root` on `comm`, checked. */
static void one(MPI_Comm comm, MPI_Datatype dt, int count, size_t span, int contig, int root) {
    int rank, size, tsize;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Type_size(dt, &tsize);
    unsigned long long k = next_index(comm);
    size_t bytes = (size_t)tsize * (size_t)count;
    unsigned char *buf = malloc(span + 1), *ref = malloc(span + 1);
    for (size_t i = 0; i < span; i++) {
        buf[i] = rank == root ? pattern(root, k, i) : (unsigned char)(0xA5 ^ i);
        ref[i] = buf[i];
    }
#if MPI_VERSION >= 4
    /* The large-count entry point, for every other call where the header has it. */
    int rc = k % 2 ? MPI_Bcast_c(buf, (MPI_Count)count, dt, root, comm)
                   : MPI_Bcast(buf, count, dt, root, comm);
#else
    int rc = MPI_Bcast(buf, count, dt, root, comm);
#endif
    if (rc != MPI_SUCCESS) fail(comm, "MPI_Bcast error", root, k, 0);
    if (PMPI_Bcast(ref, count, dt, root, comm) != MPI_SUCCESS) fail(comm, "PMPI_Bcast error", root, k, 0);
    if (memcmp(buf, ref, span) != 0) {
        size_t at = 0;
        while (buf[at] == ref[at]) at++;
        fail(comm, "differs from PMPI_Bcast", root, k, at);
    }
    if (contig) {
        for (size_t i = 0; i < span; i++)
            if (buf[i] != pattern(root, k, i)) fail(comm, "differs from the root's bytes", root, k, i);
    }
    if (threshold >= 0 && contig && size > 2 && count > 0 && (long long)bytes > threshold) expect_windrose++;
    free(buf);
    free(ref);
}

/* Every root, the named types and the derived ones, sizes from 0 to max_bytes. */
static void sweep(MPI_Comm comm, size_t max_bytes) {
    int size;
    MPI_Comm_size(comm, &size);
    static const size_t sizes[] = {0, 1, 7, 1000, 4096, 65537, 300000, 1 << 20, 4 << 20, 16 << 20};
    MPI_Datatype trip, vec;
    MPI_Type_contiguous(3, MPI_INT, &trip);
    MPI_Type_commit(&trip);
    for (int root = 0; root < size; root++) {
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes && sizes[s] <= max_bytes; s++) {
            size_t b = sizes[s];
            /* The big ones only as bytes and from two roots: the rest are the same path. */
            if (b > (1 << 20) && root > 1) continue;
            one(comm, MPI_BYTE, (int)b, b, 1, root);
            if (b > (1 << 20)) continue;
            one(comm, MPI_INT, (int)(b / 4), b / 4 * 4, 1, root);
            one(comm, MPI_DOUBLE, (int)(b / 8), b / 8 * 8, 1, root);
            one(comm, trip, (int)(b / 12), b / 12 * 12, 1, root);
            /* A vector: every other int, holes between (the shim falls back). */
            int n = (int)(b / 8);
            if (n > 0) {
                MPI_Type_vector(n, 1, 2, MPI_INT, &vec);
                MPI_Type_commit(&vec);
                one(comm, vec, 1, (size_t)(2 * n - 1) * 4, 0, root);
                MPI_Type_free(&vec);
            }
        }
    }
    MPI_Type_free(&trip);
}

/* A root sending more than the others' buffers hold, on a communicator whose errors return:
 * the others get MPI_ERR_TRUNCATE and no byte past their buffer, the root succeeds, and the
 * next broadcast on the communicator works. Prints "truncate-ok RANK". */
static int truncate_check(size_t n) {
    MPI_Comm comm;
    int rank;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    size_t mine = rank == 0 ? n : n / 2;
    unsigned char *buf = malloc(n);
    memset(buf, rank == 0 ? 0x11 : 0x22, n);
    int rc = MPI_Bcast(buf, (int)mine, MPI_BYTE, 0, comm), cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    int want = rank == 0 ? MPI_SUCCESS : MPI_ERR_TRUNCATE;
    if (cls != want) {
        fprintf(stderr, "rank %d: error class %d, expected %d\n", rank, cls, want);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    for (size_t i = mine; i < n; i++)
        if (buf[i] != (rank == 0 ? 0x11 : 0x22)) {
            fprintf(stderr, "rank %d: byte %zu past the buffer was written\n", rank, i);
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
    /* The communicator still works. */
    memset(buf, rank == 0 ? 0x33 : 0, n);
    if (MPI_Bcast(buf, (int)n, MPI_BYTE, 0, comm) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 4);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != 0x33) MPI_Abort(MPI_COMM_WORLD, 4);
    free(buf);
    MPI_Comm_free(&comm);
    printf("truncate-ok %d\n", rank);
    return 0;
}

/* MPI_Comm_free does not synchronise: rank 0 frees a communicator whose last broadcast rank
 * 1 rooted, then sends to rank 1, which frees it only after that receive. The shim must not
 * wait in rank 0's free for rank 1's end of the broadcast. Then broadcasts on
 * MPI_COMM_WORLD go on (and release the freed group). Prints "free-ok RANK". */
static int free_check(size_t n) {
    MPI_Comm comm;
    int rank, token = 42;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &rank);
    unsigned char *buf = malloc(n);
    memset(buf, rank == 1 ? 0x5A : 0, n);
    if (MPI_Bcast(buf, (int)n, MPI_BYTE, 1, comm) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 5);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != 0x5A) MPI_Abort(MPI_COMM_WORLD, 5);
    if (rank == 0) {
        MPI_Comm_free(&comm);
        MPI_Send(&token, 1, MPI_INT, 1, 9, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Comm_free(&comm);
    } else {
        MPI_Comm_free(&comm);
    }
    for (int i = 0; i < 5; i++) {
        memset(buf, rank == 0 ? 0x66 + i : 0, n);
        if (MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 5);
        for (size_t j = 0; j < n; j++)
            if (buf[j] != 0x66 + i) MPI_Abort(MPI_COMM_WORLD, 5);
    }
    free(buf);
    printf("free-ok %d\n", rank);
    return 0;
}

/* MPI_Ibcast from every root and (MPI 4) a persistent MPI_Bcast_init started twice, each
 * checked. Prints "nonblocking-ok RANK IBCASTS INITS" (the shim forwards both to PMPI and
 * counts them as passthrough calls). */
static int nonblocking_check(size_t n) {
    int rank, size;
    unsigned long long ibcasts = 0, inits = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char *buf = malloc(n);
    for (int root = 0; root < size; root++) {
        for (size_t i = 0; i < n; i++) buf[i] = rank == root ? pattern(root, 100, i) : 0;
        MPI_Request req;
        if (MPI_Ibcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
            MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 6);
        ibcasts++;
        for (size_t i = 0; i < n; i++)
            if (buf[i] != pattern(root, 100, i)) fail(MPI_COMM_WORLD, "MPI_Ibcast", root, 100, i);
    }
#if MPI_VERSION >= 4
    MPI_Request p;
    if (MPI_Bcast_init(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &p) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 6);
    inits++;
    for (unsigned long long k = 200; k < 202; k++) {
        for (size_t i = 0; i < n; i++) buf[i] = rank == 0 ? pattern(0, k, i) : 0;
        if (MPI_Start(&p) != MPI_SUCCESS || MPI_Wait(&p, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 6);
        for (size_t i = 0; i < n; i++)
            if (buf[i] != pattern(0, k, i)) fail(MPI_COMM_WORLD, "MPI_Bcast_init", 0, k, i);
    }
    MPI_Request_free(&p);
#endif
    free(buf);
    printf("nonblocking-ok %d %llu %llu\n", rank, ibcasts, inits);
    return 0;
}

/* Which broadcast rank 1's main thread is in (or about to enter). */
static volatile int kill_at_call;

static void *killer(void *arg) {
    (void)arg;
    /* Once the third broadcast has begun, rank 1 dies at once, without a word to MPI. */
    while (__atomic_load_n(&kill_at_call, __ATOMIC_SEQ_CST) < 3) usleep(1000);
    usleep(20000);
    raise(SIGKILL);
    return NULL;
}

/* Rank 1 kills itself with SIGKILL during the third of a series of large broadcasts from
 * rank 0 (its helper thread raises it 20 ms into the call; each call moves BYTES through
 * windrose's tree). The survivors' MPI_Bcast returns errors to them (MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD); a survivor that sees one prints "kill-error RANK CLASS" and exits 7. A
 * rank that gets through every broadcast prints "kill-survived RANK". */
static int kill_check(size_t n) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    unsigned char *buf = malloc(n);
    memset(buf, 0x77, n);
    pthread_t t;
    if (rank == 1) pthread_create(&t, NULL, killer, NULL);
    for (int call = 1; call <= 200; call++) {
        if (rank == 1) __atomic_store_n(&kill_at_call, call, __ATOMIC_SEQ_CST);
        int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            int cls = 0;
            MPI_Error_class(rc, &cls);
            printf("kill-error %d %d\n", rank, cls);
            fflush(stdout);
            exit(7);
        }
    }
    printf("kill-survived %d\n", rank);
    fflush(stdout);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    {
        /* For a launcher's guard, in every mode: this rank is past MPI_Init. */
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        printf("init-ok %d\n", rank);
        fflush(stdout);
    }
    if (argc == 3 && strcmp(argv[1], "free") == 0) {
        free_check((size_t)atoll(argv[2]));
        MPI_Finalize();
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "nonblocking") == 0) {
        nonblocking_check((size_t)atoll(argv[2]));
        MPI_Finalize();
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "kill") == 0) {
        kill_check((size_t)atoll(argv[2]));
        MPI_Finalize();
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "truncate") == 0) {
        truncate_check((size_t)atoll(argv[2]));
        MPI_Finalize();
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s THRESHOLD MAX_BYTES REPEATS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    threshold = atoll(argv[1]);
    size_t max_bytes = (size_t)atoll(argv[2]);
    int repeats = atoi(argv[3]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    sweep(MPI_COMM_WORLD, max_bytes);

    /* A communicator from MPI_Comm_split: all but the last rank, in reverse order. */
    MPI_Comm part;
    MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1, size - rank, &part);
    part_comm = part;
    sweep(part, max_bytes < (1 << 20) ? max_bytes : (1 << 20));

    /* One from MPI_Comm_dup, interleaved with MPI_COMM_WORLD. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    dup_comm = dup;
    sweep(dup, max_bytes < 300000 ? max_bytes : 300000);

    /* Many calls in a row, roots and sizes varying, on world and dup in turn. */
    for (int i = 0; i < repeats; i++) {
        int root = (i * 7 + 3) % size;
        size_t b = 1000 + (size_t)((i * 104729) % 400000);
        one(i % 3 == 2 ? dup : MPI_COMM_WORLD, MPI_BYTE, (int)b, b, 1, root);
    }
    MPI_Comm_free(&part);
    MPI_Comm_free(&dup);

    printf("expect-windrose %d %llu\n", rank, expect_windrose);
    printf("checked %d %llu\n", rank, calls);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}

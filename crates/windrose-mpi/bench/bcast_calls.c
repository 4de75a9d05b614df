/* Times every MPI_Bcast call (through the shim when it is preloaded, the MPI library's own
 * otherwise) on MPI_COMM_WORLD, MPI_BYTE, root 0, and prints one CSV line per call from rank 0:
 *
 *     LABEL,BYTES,CALL,SECONDS
 *
 * where SECONDS is the slowest rank's time for that call (barrier before, max after). Each
 * size first runs one untimed call (the shim sets up its group at its first call). Usage:
 *
 *     bcast_calls LABEL CALLSxBYTES...        e.g.  bcast_calls native 9x1024 5x1048576
 *
 * With BCAST_CALLS_HOOK_AFTER=N and BCAST_CALLS_HOOK="command", rank 0 runs the command (via
 * system(3), outside any timed call, before the next call's barrier) after the N-th timed call
 * of the first size: the series' timed change of a link. A hook that fails aborts the run.
 * With BCAST_CALLS_PMPI_BELOW=B, every timed call of fewer than B bytes is paired with the same
 * call to PMPI_Bcast (the library's own, also under the shim), printed as LABEL/pmpi, the two
 * taking turns at going first: the shim's fallback against the library in the same process.
 * The contents are checked: every rank's buffer must equal the root's after each call. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timed_bcast.h"

/* The root's pattern for call `call`: every byte depends on its offset and the call. */
static void fill(unsigned char *buf, int n, int call) {
    uint32_t x = 2463534242u ^ (uint32_t)call * 2654435761u;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
}

static int parse(const char *arg, int *calls, int *bytes) {
    char *end;
    long c = strtol(arg, &end, 10);
    if (end == arg || *end != 'x' || c < 1 || c > 100000) return -1;
    const char *b = end + 1;
    long n = strtol(b, &end, 10);
    if (end == b || *end != '\0' || n < 0 || n > 1L << 30) return -1;
    *calls = (int)c;
    *bytes = (int)n;
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: %s LABEL CALLSxBYTES...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int s = 2; s < argc; s++) {
        int calls, n;
        if (parse(argv[s], &calls, &n) != 0) {
            if (rank == 0)
                fprintf(stderr, "bcast_calls: bad argument '%s': expected CALLSxBYTES, e.g. 5x1048576\n",
                        argv[s]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    const char *hook = getenv("BCAST_CALLS_HOOK");
    int hook_after = getenv("BCAST_CALLS_HOOK_AFTER") ? atoi(getenv("BCAST_CALLS_HOOK_AFTER")) : -1;
    long pmpi_below = getenv("BCAST_CALLS_PMPI_BELOW") ? atol(getenv("BCAST_CALLS_PMPI_BELOW")) : 0;
    for (int s = 2; s < argc; s++) {
        int calls, n;
        parse(argv[s], &calls, &n);
        unsigned char *buf = malloc((size_t)n + 1), *want = malloc((size_t)n + 1);
        if (!buf || !want) MPI_Abort(MPI_COMM_WORLD, 3);
        for (int call = 0; call <= calls; call++) {
            int both = n < pmpi_below;
            for (int k = 0; k <= both; k++) {
                /* Both: the call that goes first alternates, so neither gains from its place. */
                int pmpi = both ? (call + k) % 2 : 0;
                fill(want, n, call);
                if (rank == 0) memcpy(buf, want, (size_t)n);
                else memset(buf, 0, (size_t)n);
                double t = timed_bcast(pmpi, buf, n);
                if (memcmp(buf, want, (size_t)n) != 0) {
                    fprintf(stderr, "bcast_calls: rank %d: call %d of %d bytes%s: wrong contents\n",
                            rank, call, n, pmpi ? " (PMPI_Bcast)" : "");
                    MPI_Abort(MPI_COMM_WORLD, 4);
                }
                if (call > 0 && rank == 0) { /* call 0: untimed warm-up */
                    printf("%s%s,%d,%d,%.6f\n", argv[1], pmpi ? "/pmpi" : "", n, call, t);
                    fflush(stdout);
                }
            }
            if (call == 0) continue;
            if (s == 2 && call == hook_after && hook && rank == 0) {
                int rc = system(hook);
                if (rc != 0) {
                    fprintf(stderr, "bcast_calls: hook '%s' failed (%d)\n", hook, rc);
                    MPI_Abort(MPI_COMM_WORLD, 5);
                }
            }
        }
        free(buf);
        free(want);
    }
    MPI_Finalize();
    return 0;
}

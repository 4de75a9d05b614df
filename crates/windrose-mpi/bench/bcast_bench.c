/* Times MPI_Bcast (through the shim when it is preloaded) against PMPI_Bcast (the MPI
 * library's own) on MPI_COMM_WORLD, MPI_BYTE, root 0: for each size, REPS calls of each,
 * alternating, each call's time the slowest rank's (barrier before, max after), and prints
 * the medians. Usage: bcast_bench REPS SIZE... (bytes). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timed_bcast.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: %s REPS SIZE...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int reps = atoi(argv[1]);
    double *a = malloc(sizeof(double) * (size_t)reps), *b = malloc(sizeof(double) * (size_t)reps);
    if (rank == 0) printf("%d ranks, %d calls each, medians of the slowest rank\n%12s %14s %14s %8s\n",
                          size, reps, "bytes", "MPI_Bcast ms", "PMPI_Bcast ms", "ratio");
    for (int s = 2; s < argc; s++) {
        int n = atoi(argv[s]);
        char *buf = malloc((size_t)n + 1);
        memset(buf, rank, (size_t)n);
        timed_bcast(0, buf, n); /* warm-up: the shim sets up its group at its first call */
        timed_bcast(1, buf, n);
        for (int i = 0; i < reps; i++) {
            a[i] = timed_bcast(0, buf, n);
            b[i] = timed_bcast(1, buf, n);
        }
        qsort(a, (size_t)reps, sizeof *a, cmp);
        qsort(b, (size_t)reps, sizeof *b, cmp);
        if (rank == 0)
            printf("%12d %14.3f %14.3f %8.2f\n", n, a[reps / 2] * 1e3, b[reps / 2] * 1e3,
                   a[reps / 2] / b[reps / 2]);
        free(buf);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}

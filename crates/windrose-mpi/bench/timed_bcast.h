/* One timed broadcast of `n` bytes from rank 0 on MPI_COMM_WORLD, the time of the slowest rank,
 * through MPI_Bcast (the shim when preloaded) or the library's own PMPI_Bcast: shared by the
 * benchmarks of this folder so that they time a call the same way. */
#ifndef WINDROSE_TIMED_BCAST_H
#define WINDROSE_TIMED_BCAST_H
#include <mpi.h>

static double timed_bcast(int through_pmpi, void *buf, int n) {
    double t, slowest;
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    if (through_pmpi) PMPI_Bcast(buf, n, MPI_BYTE, 0, MPI_COMM_WORLD);
    else MPI_Bcast(buf, n, MPI_BYTE, 0, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}
#endif

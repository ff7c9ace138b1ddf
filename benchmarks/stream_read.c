/* STREAM-like pure read kernel (the reference for servecheck's bandwidth probe).
 *
 * Usage: stream_read BYTES [NTIMES] [huge]
 * Allocates BYTES of doubles, first-touches them in parallel with the same static OpenMP schedule the
 * read uses (pages land where they are read), then times NTIMES passes of a parallel sum and prints
 * the best and median bandwidth in GB/s (10^9 bytes per second). Like STREAM, it counts only the
 * explicit traffic: one read of every element per pass, no writes.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s BYTES [NTIMES]\n", argv[0]); return 2; }
    size_t bytes = strtoull(argv[1], NULL, 10);
    int ntimes = argc > 2 ? atoi(argv[2]) : 10;
    if (ntimes < 2) ntimes = 2; /* pass 0 is the warm-up: at least one timed pass must follow */
    int huge = argc > 3 && strcmp(argv[3], "huge") == 0;
    size_t n = bytes / sizeof(double);
    size_t align = (size_t)2 << 20;
    size_t padded = (n * sizeof(double) + align - 1) / align * align;
    double *a = (double *)aligned_alloc(align, padded);
    if (!a) { fprintf(stderr, "cannot allocate %zu bytes\n", bytes); return 1; }
    /* 4 KiB pages unless asked for transparent huge pages, like servecheck's two probe modes */
    madvise(a, padded, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 1.0 + (double)(i & 7) * 0.125;
    double *t = (double *)malloc(sizeof(double) * (size_t)ntimes);
    double total = 0.0;
    for (int k = 0; k < ntimes; k++) {
        double s = 0.0;
        double t0 = omp_get_wtime();
#pragma omp parallel for simd schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        t[k] = omp_get_wtime() - t0;
        total += s;
    }
    qsort(t + 1, (size_t)(ntimes - 1), sizeof(double), cmp); /* pass 0 is the warm-up */
    double best = (double)bytes / t[1] / 1e9, median = (double)bytes / t[1 + (ntimes - 1) / 2] / 1e9;
    printf("threads %d\nbest_gb_s %.3f\nmedian_gb_s %.3f\nchecksum %.1f\n", omp_get_max_threads(), best, median, total);
    free(t);
    free(a);
    return 0;
}

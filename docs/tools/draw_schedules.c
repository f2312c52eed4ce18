/* Draws the pipeline-schedule figures of the documentation with the public C API.
 *
 *   ptdp-draw-schedules OUTDIR [p m]
 *
 * Writes OUTDIR/schedule_gpipe.svg, schedule_1f1b.svg, schedule_interleaved_1f1b.svg (v = 2),
 * schedule_zb_h1.svg, schedule_interleaved_zb.svg (v = 2), schedule_zb_v.svg and
 * schedule_dualpipe_v.svg (v = 2 in the V placement; DualPipeV needs m >= 2p) for p pipeline
 * ranks and m microbatches (default p = 4, m = 8) under
 * the default cost model (forward 1, backward 2, zero-bubble B = W = 1), and prints each
 * schedule's simulated bubble fraction and peak activation slots, the numbers the concepts
 * guide quotes. Exit status: 0 on success, 1 when a call fails, 2 on bad arguments. */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_P 64

typedef struct figure {
  ptdp_schedule_kind kind;
  int32_t v;
  const char* file;
  const char* title;
} figure;

static int report(const char* call, ptdp_status st) {
  fprintf(stderr, "ptdp-draw-schedules: %s: %s: %s\n", call, ptdp_status_string(st), ptdp_last_error());
  return 1;
}

static int parse_positive(const char* s, int32_t* out) {
  char* end = NULL;
  const long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 4096) return 0;
  *out = (int32_t)v;
  return 1;
}

static int draw(const figure* f, int32_t p, int32_t m, const char* outdir) {
  ptdp_schedule s = NULL;
  ptdp_status st = ptdp_schedule_create(f->kind, p, m, f->v, &s);
  if (st != PTDP_SUCCESS) return report("ptdp_schedule_create", st);
  ptdp_schedule_costs costs;
  ptdp_schedule_costs_init(&costs);
  double makespan = 0.0, bubble = 0.0;
  int32_t peak[MAX_P];
  st = ptdp_schedule_simulate(s, &costs, &makespan, &bubble, peak, MAX_P);
  if (st != PTDP_SUCCESS) {
    const int rc = report("ptdp_schedule_simulate", st); /* before destroy clears the message */
    ptdp_schedule_destroy(s);
    return rc;
  }
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", outdir, f->file) >= (int)sizeof path) {
    ptdp_schedule_destroy(s);
    fprintf(stderr, "ptdp-draw-schedules: output path too long\n");
    return 2;
  }
  st = ptdp_schedule_write_svg(s, &costs, path);
  const int rc = st == PTDP_SUCCESS ? 0 : report("ptdp_schedule_write_svg", st);
  ptdp_schedule_destroy(s);
  if (rc != 0) return rc;
  int32_t most = 0;
  for (int32_t r = 0; r < p; ++r) most = peak[r] > most ? peak[r] : most;
  printf("%-26s p = %d, m = %d, v = %d: makespan %.2f, bubble fraction %.4f, peak slots %d (rank 0) %d (max) -> %s\n",
         f->title, (int)p, (int)m, (int)f->v, makespan, bubble, (int)peak[0], (int)most, path);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    fprintf(stderr, "usage: ptdp-draw-schedules OUTDIR [p m]\n");
    return 2;
  }
  int32_t p = 4, m = 8;
  if (argc == 4 && (!parse_positive(argv[2], &p) || !parse_positive(argv[3], &m) || p > MAX_P)) {
    fprintf(stderr, "ptdp-draw-schedules: p must be in [1, %d] and m in [1, 4096]\n", MAX_P);
    return 2;
  }
  const figure figures[] = {
      {PTDP_SCHEDULE_GPIPE, 1, "schedule_gpipe.svg", "GPipe"},
      {PTDP_SCHEDULE_1F1B, 1, "schedule_1f1b.svg", "1F1B"},
      {PTDP_SCHEDULE_INTERLEAVED_1F1B, 2, "schedule_interleaved_1f1b.svg", "interleaved 1F1B"},
      {PTDP_SCHEDULE_ZB_H1, 1, "schedule_zb_h1.svg", "ZB-H1"},
      {PTDP_SCHEDULE_INTERLEAVED_ZB, 2, "schedule_interleaved_zb.svg", "interleaved zero bubble"},
      {PTDP_SCHEDULE_ZB_V, 2, "schedule_zb_v.svg", "ZB-V"},
      {PTDP_SCHEDULE_DUALPIPE_V, 2, "schedule_dualpipe_v.svg", "DualPipeV"},
  };
  for (size_t i = 0; i < sizeof figures / sizeof figures[0]; ++i) {
    const int rc = draw(&figures[i], p, m, argv[1]);
    if (rc != 0) return rc;
  }
  return 0;
}

/* ptdp-flight-analyze: reads every rank's flight record in a directory and names the rank and
 * the operation where the ranks diverge.
 *
 *   PTDP_FLIGHT_RECORDER_DIR=/shared/flight PTDP_COMM_TIMEOUT_S=60 mpirun -np 8 ptdp-train ...
 *   ptdp-flight-analyze /shared/flight
 *
 * A thin main over ptdp_flight_analyze(). Exit status: 0 when the records agree, 1 when they
 * name a culprit (the report says which rank and operation), 2 on bad arguments or unreadable
 * records.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fprintf(argc == 2 ? stdout : stderr,
            "usage: %s DIR\n"
            "Reads DIR/flight-rank*.json (written on a communication timeout when\n"
            "PTDP_FLIGHT_RECORDER_DIR=DIR, or by ptdp_flight_recorder_dump) and names the rank and\n"
            "the operation where the ranks diverge. Exit status: 0 consistent, 1 culprit found,\n"
            "2 error.\n",
            argv[0]);
    return argc == 2 ? 0 : 2;
  }
  size_t length = 0;
  int32_t culprit = -1;
  ptdp_status s = ptdp_flight_analyze(argv[1], NULL, 0, &length, &culprit);
  if (s != PTDP_SUCCESS && s != PTDP_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "ptdp-flight-analyze: %s\n", ptdp_last_error());
    return 2;
  }
  char* report = (char*)malloc(length + 1);
  if (report == NULL) {
    fprintf(stderr, "ptdp-flight-analyze: out of memory\n");
    return 2;
  }
  s = ptdp_flight_analyze(argv[1], report, length + 1, &length, &culprit);
  if (s != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-flight-analyze: %s\n", ptdp_last_error());
    free(report);
    return 2;
  }
  fputs(report, stdout);
  free(report);
  return culprit >= 0 ? 1 : 0;
}

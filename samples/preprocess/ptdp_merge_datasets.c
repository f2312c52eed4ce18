/* ptdp-merge-datasets: Megatron-LM's tools/merge_datasets.py on the C API. Concatenates indexed
 * data sets of one dtype into one:
 *
 *   ptdp-merge-datasets --input shards/ --output-prefix data/corpus_text_document
 *   ptdp-merge-datasets --datasets a_text_document b_text_document --output-prefix ab_text_document
 *
 * --input takes every PREFIX.bin/PREFIX.idx pair of a directory in the order of their names (as
 * Megatron's script); --datasets takes the prefixes in the order given. A thin main over
 * ptdp_merge_datasets_main. Exit status: 0 on success, 1 on a failure, 2 on bad flags.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int32_t exit_code = 1;
  if (ptdp_merge_datasets_main(argc, (const char* const*)argv, &exit_code) != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-merge-datasets: %s\n", ptdp_last_error());
    return 1;
  }
  return exit_code;
}

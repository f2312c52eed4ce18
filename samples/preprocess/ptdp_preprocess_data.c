/* ptdp-preprocess-data: Megatron-LM's tools/preprocess_data.py on the C API. JSON lines in (one
 * document per line, plain or gzip), Megatron's indexed data sets out, one per --json-keys key:
 *
 *   ptdp-preprocess-data --input corpus.jsonl more.jsonl.gz --json-keys text \
 *       --output-prefix data/corpus --tokenizer-type GPT2BPETokenizer \
 *       --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 8
 *
 * writes data/corpus_text_document.bin and .idx, which ptdp-train --data-path and Megatron-LM
 * read. A thin main over ptdp_preprocess_main: the flags, the progress lines ("Processed N
 * documents (D docs/s, M MB/s).") and the messages are the library's.
 * Exit status: 0 on success, 1 on a failure (a bad line is named FILE:LINE), 2 on bad flags.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int32_t exit_code = 1;
  if (ptdp_preprocess_main(argc, (const char* const*)argv, &exit_code) != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-preprocess-data: %s\n", ptdp_last_error());
    return 1;
  }
  return exit_code;
}

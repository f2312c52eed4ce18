/* ptdp-train: trains a GPT with tensor, pipeline and data parallelism, Megatron-LM style.
 *
 *   mpirun -np 4 ptdp-train --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
 *       --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
 *       --micro-batch-size 4 --global-batch-size 16 --train-iters 200 --lr 1e-3 \
 *       --text-file corpus.txt --save ckpt --save-interval 100
 *
 * A thin main over the library's training loop (ptdp_train_main), the same loop that
 * ptdp.train() in Python and the Rust, Julia and Fortran front ends run: the flags, the log
 * lines, the checkpoints and the error messages are the library's.
 * Exit status: 0 on success, 1 on a failure (the message names what went wrong), 2 on bad flags.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int32_t exit_code = 1;
  if (ptdp_train_main(argc, (const char* const*)argv, &exit_code) != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-train: %s\n", ptdp_last_error());
    return 1;
  }
  return exit_code;
}

#include "core/train/batch_reader.h"

#include "core/data/blended_dataset.h"

namespace ptdp {

BatchReader::BatchReader(const TrainArgs& args, int64_t global_batch, int m, int b, int dp_rank)
    : args_(args), rows_(static_cast<int64_t>(m) * b), first_row_(static_cast<int64_t>(dp_rank) * rows_) {
  const int64_t evals = args.eval_interval > 0 ? args.train_iters / args.eval_interval + 1 : 0;
  GptDatasetOptions o;
  o.split = args.split;
  o.seq_length = args.seq_length;
  o.seed = args.seed;
  o.num_samples = {args.train_iters * global_batch, evals * args.eval_iters * global_batch, 0};
  data_ = make_gpt_dataset(gpt_data_spec(args), o, args.vocab_size);  // one source, or Megatron's blends
  const std::size_t ids =
      static_cast<std::size_t>(m) * static_cast<std::size_t>(b) * static_cast<std::size_t>(args.seq_length);
  tokens_.resize(ids);
  labels_.resize(ids);
  if (args.reset_position_ids) {
    position_ids_.resize(ids);
    layout_.position_ids = position_ids_.data();
  }
  if (args.reset_attention_mask) {
    document_starts_.resize(ids);
    layout_.document_starts = document_starts_.data();
  }
}

void BatchReader::read(DataSplit split, int64_t batch_start) {
  data_->get_batch(split, batch_start + first_row_, rows_, tokens_.data(), labels_.data());
  if (uses_eod_masks(args_)) {  // Megatron's masks and positions from the end-of-document token
    eod_masks(tokens_.data(), rows_, args_.seq_length, static_cast<int32_t>(*args_.eod_token_id), args_.eod_mask_loss,
              labels_.data(), layout_.position_ids ? position_ids_.data() : nullptr,
              layout_.document_starts ? document_starts_.data() : nullptr);
  }
}

}  // namespace ptdp

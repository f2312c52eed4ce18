/* ptdp-plan: how to lay out a GPT on a GPU cluster.
 *
 *   ptdp-plan --cluster dgx-a100 --num-gpus 1536 --num-layers 80 --hidden-size 12288 \
 *       --num-attention-heads 96 --seq-length 2048 --vocab-size 51200 --global-batch-size 2304 --fp16
 *
 * Written on the public C API only: the library parses the flags (the same names as ptdp-train
 * where they overlap), searches the layouts and writes the report; this program prints it.
 * Exit status: 0 with a layout, 1 when none fits (the message says what is missing) or on
 * another failure, 2 on bad flags.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>

/* Fetches a text with the library's count/capacity protocol; NULL after printing the error. */
typedef ptdp_status (*text_getter)(ptdp_plan, char*, size_t, size_t*);

static char* plan_text(ptdp_plan plan, text_getter get, const char* what) {
  size_t length = 0;
  get(plan, NULL, 0, &length); /* fails with the size needed in length */
  char* text = malloc(length + 1);
  if (text == NULL) {
    fprintf(stderr, "ptdp-plan: out of memory for the %s\n", what);
    return NULL;
  }
  ptdp_status st = get(plan, text, length + 1, &length);
  if (st != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-plan: %s: %s\n", what, ptdp_last_error());
    free(text);
    return NULL;
  }
  return text;
}

static int print_help(void) {
  size_t length = 0;
  ptdp_plan_help("ptdp-plan", NULL, 0, &length);
  char* text = malloc(length + 1);
  if (text == NULL || ptdp_plan_help("ptdp-plan", text, length + 1, &length) != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-plan: %s\n", ptdp_last_error());
    free(text);
    return 1;
  }
  fputs(text, stdout);
  free(text);
  return 0;
}

static int list_clusters(void) {
  printf("[\n");
  for (int32_t i = 0; ptdp_cluster_preset_name(i) != NULL; ++i) {
    ptdp_cluster c;
    if (ptdp_cluster_preset(ptdp_cluster_preset_name(i), &c) != PTDP_SUCCESS) {
      fprintf(stderr, "ptdp-plan: %s\n", ptdp_last_error());
      return 1;
    }
    printf("  {\"preset\": \"%s\", \"gpus_per_node\": %d, \"memory_gib\": %.2f, \"memory_reserve_gib\": %.2f,\n"
           "   \"peak_tflops_16bit\": %.1f, \"peak_tflops_fp32\": %.1f, \"gemm_efficiency\": %.2f,\n"
           "   \"memory_bandwidth_gbs\": %.0f, \"intra_node_bandwidth_gbs\": %.0f, \"intra_node_latency_us\": %.1f,\n"
           "   \"inter_node_bandwidth_gbs\": %.0f, \"inter_node_latency_us\": %.1f,\n"
           "   \"elementwise_bandwidth_gbs\": %.0f, \"gemm_table_16bit\": \"%s\", \"gemm_table_fp32\": \"%s\"}%s\n",
           c.name, (int)c.gpus_per_node, c.memory_bytes / (1024.0 * 1024.0 * 1024.0),
           c.memory_reserve_bytes / (1024.0 * 1024.0 * 1024.0), c.peak_flops_16bit / 1e12, c.peak_flops_fp32 / 1e12,
           c.gemm_efficiency, c.memory_bandwidth / 1e9, c.intra_node_bandwidth / 1e9, c.intra_node_latency * 1e6,
           c.inter_node_bandwidth / 1e9, c.inter_node_latency * 1e6, c.elementwise_bandwidth / 1e9, c.gemm_table_16bit,
           c.gemm_table_fp32, ptdp_cluster_preset_name(i + 1) ? "," : "");
  }
  printf("]\n");
  return 0;
}

int main(int argc, char** argv) {
  ptdp_plan_options options;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  ptdp_status st = ptdp_plan_parse_args(argc, (const char* const*)argv, &options, &cluster, &cli);
  if (st != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-plan: %s\n(see ptdp-plan --help)\n", ptdp_last_error());
    return st == PTDP_ERR_IO ? 1 : 2;
  }
  if (cli.help) return print_help();
  if (cli.list_clusters) return list_clusters();

  ptdp_plan plan = NULL;
  st = ptdp_plan_create(&options, &cluster, &plan);
  if (st != PTDP_SUCCESS) {
    fprintf(stderr, "ptdp-plan: %s\n", ptdp_last_error());
    return st == PTDP_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  int32_t count = 0;
  ptdp_plan_num_layouts(plan, &count);
  char* text = plan_text(plan, cli.json ? ptdp_plan_to_json : ptdp_plan_report, cli.json ? "JSON" : "report");
  int status = text == NULL ? 1 : 0;
  if (text != NULL) {
    fputs(text, count > 0 || cli.json ? stdout : stderr);
    if (cli.json) fputs("\n", stdout);
    free(text);
  }
  if (status == 0 && count == 0) status = 1;
  if (status == 0 && cli.schedule_svg != NULL) {
    if (ptdp_plan_write_schedule_svg(plan, 0, cli.schedule_svg) != PTDP_SUCCESS) {
      fprintf(stderr, "ptdp-plan: %s\n", ptdp_last_error());
      status = 1;
    } else if (!cli.json) {
      printf("\nschedule of #1 drawn to %s\n", cli.schedule_svg);
    }
  }
  ptdp_plan_destroy(plan);
  return status;
}

/* ptdp-plot: pictures of training runs.
 *
 *   ptdp-plot run-a/log.jsonl run-b/log.jsonl -o runs.svg --label "t=2 p=2" --label "t=4 p=1"
 *
 * Draws the JSON lines that `ptdp-train --log-json` writes (loss and validation loss, learning
 * rate, grad norm, loss scale and tokens per second against the iteration, the runs overlaid)
 * as one SVG file a browser shows; `ptdp-train --plot-file` draws the same picture while it
 * trains. Written on the public C API only: the library reads the logs and draws; this program
 * parses its command line. Exit status: 0 when the picture is written, 1 when a log cannot be
 * read or the picture cannot be written, 2 on bad flags.
 */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_help(FILE* out) {
  fputs("usage: ptdp-plot LOG.jsonl [LOG.jsonl ...] -o PATH.svg [--label NAME]... [--title TEXT]\n"
        "\n"
        "Draws training logs (the JSON lines of ptdp-train --log-json) as one SVG: training and\n"
        "validation loss, learning rate, grad norm, loss scale and tokens per second against the\n"
        "iteration, one colour per log. The SVG is replaced atomically, so it can be redrawn while\n"
        "a browser shows it.\n"
        "\n"
        "  -o, --output PATH   the SVG file to write (required)\n"
        "  --label NAME        the legend's name for the next log, in the order the logs are given\n"
        "                      (default: the log's file name, or its path where names coincide)\n"
        "  --title TEXT        the picture's title (default: training)\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit status: 0 written, 1 a log cannot be read or the SVG cannot be written, 2 bad flags.\n",
        out);
}

static int usage_error(const char* fmt, const char* what) {
  fprintf(stderr, "ptdp-plot: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\nrun 'ptdp-plot --help' for the flags\n");
  return 2;
}

/* The value of `--flag VALUE` or `--flag=VALUE` at argv[*i] when argv[*i] is that flag (long
 * or short spelling); advances *i past a separate value. Sets *missing when the value is absent. */
static const char* flag_value(int argc, char** argv, int* i, const char* long_name, const char* short_name,
                              int* matched, int* missing) {
  const char* arg = argv[*i];
  const size_t n = strlen(long_name);
  *matched = 0;
  *missing = 0;
  if (strncmp(arg, long_name, n) == 0 && arg[n] == '=') {
    *matched = 1;
    return arg + n + 1;
  }
  if (strcmp(arg, long_name) == 0 || (short_name != NULL && strcmp(arg, short_name) == 0)) {
    *matched = 1;
    if (*i + 1 >= argc) {
      *missing = 1;
      return NULL;
    }
    *i += 1;
    return argv[*i];
  }
  return NULL;
}

int main(int argc, char** argv) {
  const char** logs = calloc((size_t)argc + 1, sizeof *logs);
  const char** labels = calloc((size_t)argc + 1, sizeof *labels);
  if (logs == NULL || labels == NULL) {
    fprintf(stderr, "ptdp-plot: out of memory\n");
    return 1;
  }
  int num_logs = 0, num_labels = 0, only_paths = 0, status = 0;
  const char* output = NULL;
  const char* title = NULL;
  for (int i = 1; i < argc && status == 0; ++i) {
    const char* arg = argv[i];
    int matched = 0, missing = 0;
    const char* value = NULL;
    if (only_paths || arg[0] != '-' || strcmp(arg, "-") == 0) {
      logs[num_logs++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      only_paths = 1;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      print_help(stdout);
      free(logs);
      free(labels);
      return 0;
    }
    if ((value = flag_value(argc, argv, &i, "--output", "-o", &matched, &missing)) != NULL || matched) {
      if (missing) status = usage_error("%s needs a path", arg);
      else if (value[0] == '\0') status = usage_error("%s: the path is empty", arg);
      else if (output != NULL) status = usage_error("%s given twice: one picture per run of ptdp-plot", arg);
      else output = value;
    } else if ((value = flag_value(argc, argv, &i, "--label", NULL, &matched, &missing)) != NULL || matched) {
      if (missing) status = usage_error("%s needs a name", arg);
      else if (value[0] == '\0') status = usage_error("%s: the name is empty", arg);
      else labels[num_labels++] = value;
    } else if ((value = flag_value(argc, argv, &i, "--title", NULL, &matched, &missing)) != NULL || matched) {
      if (missing) status = usage_error("%s needs a text", arg);
      else title = value;
    } else {
      status = usage_error("unknown flag '%s'", arg);
    }
  }
  if (status == 0 && num_logs == 0) status = usage_error("%s", "no training log given (LOG.jsonl ...)");
  if (status == 0 && output == NULL) status = usage_error("%s", "no output given (-o PATH.svg)");
  if (status == 0 && num_labels > num_logs) {
    char what[96];
    snprintf(what, sizeof what, "%d --label flags for %d logs: at most one per log", num_labels, num_logs);
    status = usage_error("%s", what);
  }
  if (status == 0) {
    const ptdp_status st =
        ptdp_plot_training_logs(logs, num_labels > 0 ? labels : NULL, (int32_t)num_logs, title, output);
    if (st != PTDP_SUCCESS) {
      fprintf(stderr, "ptdp-plot: %s\n", ptdp_last_error());
      status = st == PTDP_ERR_INVALID_ARGUMENT ? 2 : 1;
    } else {
      printf("ptdp-plot: wrote %s (%d run%s)\n", output, num_logs, num_logs == 1 ? "" : "s");
    }
  }
  free(logs);
  free(labels);
  return status;
}

# Builds the documentation and checks its warnings (cmake -P; run by the `docs` target and
# the test `docs_public_header`, after the build):
#   1. draws the pipeline-schedule SVGs with DRAW_TOOL into DOCS_DIR/images (Doxygen's
#      IMAGE_PATH; \image html copies them into the HTML output);
#   2. writes DOCS_DIR/generated/ptdp-train-flags.md from `TRAIN_TOOL --help`;
#   3. runs Doxygen (DOXYFILE), whose warnings go to DOCS_DIR/doxygen-warnings.log;
#   4. fails, printing them, on any warning about the public headers (ptdp.h, ptdp_mpi.h), the
#      main page, the architecture, the guides, the generated pages or the configuration;
#      warnings about the core headers (internal) are only counted. Then checks that the HTML
#      holds the figures, the flags page and the architecture.
foreach(var DOXYGEN_EXECUTABLE DOXYFILE DOCS_DIR SOURCE_DIR DRAW_TOOL TRAIN_TOOL)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "build_docs.cmake: -D${var}=... is required")
  endif()
endforeach()
foreach(tool DRAW_TOOL TRAIN_TOOL)
  if(NOT EXISTS "${${tool}}")
    message(FATAL_ERROR "build_docs.cmake: ${${tool}} is missing; build it first "
                        "(targets ptdp_docs_draw_schedules and ptdp_train_tool)")
  endif()
endforeach()

set(images "${DOCS_DIR}/images")
set(generated "${DOCS_DIR}/generated")
set(html "${DOCS_DIR}/html")
set(log "${DOCS_DIR}/doxygen-warnings.log")
file(REMOVE_RECURSE "${images}" "${generated}" "${html}")
file(MAKE_DIRECTORY "${images}" "${generated}")
file(REMOVE "${log}")

# 1. The schedule figures (p = 4, m = 8, unit forward cost).
execute_process(COMMAND "${DRAW_TOOL}" "${images}" 4 8
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "drawing the schedules failed (${rc}):\n${out}${err}")
endif()
message(STATUS "schedule figures:\n${out}")
set(figures schedule_gpipe.svg schedule_1f1b.svg schedule_interleaved_1f1b.svg schedule_zb_h1.svg
            schedule_interleaved_zb.svg schedule_zb_v.svg schedule_dualpipe_v.svg)

# 2. The flags page, from the program itself so it never drifts from the code.
execute_process(COMMAND "${TRAIN_TOOL}" --help
  RESULT_VARIABLE rc OUTPUT_VARIABLE help ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR help STREQUAL "")
  message(FATAL_ERROR "ptdp-train --help failed (${rc}):\n${err}")
endif()
string(FIND "${help}" "```" fence)
if(NOT fence EQUAL -1)
  message(FATAL_ERROR "ptdp-train --help contains a Markdown fence (```); the flags page cannot quote it")
endif()
file(WRITE "${generated}/ptdp-train-flags.md"
"# ptdp-train flags {#ptdp_train_flags}

This page is generated at documentation time from the output of `ptdp-train --help`, so it
always lists the flags of the program it was built with. The flags carry Megatron-LM's names
and meanings; those marked [ptdp] are ptdp's own. The library parses them
(`ptdp_train_config_parse()`), so the bindings accept the same command line. A value is given
as `--flag value` or `--flag=value`; boolean flags take no value. An unknown flag or a bad value
ends ptdp-train with exit status 2 and a message naming the flag. See @ref ptdp_train for how
the flags work together.

```text
${help}```
")

# 3. Doxygen.
execute_process(COMMAND "${DOXYGEN_EXECUTABLE}" "${DOXYFILE}"
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "doxygen failed (${rc}):\n${out}${err}")
endif()

# 4. The warnings. Doxygen writes one warning per "FILE:LINE: text" line, some continued on
# lines that start with spaces; each warning is attributed to the file of its first line.
set(entries "")
set(current "")
if(EXISTS "${log}")
  # Lines are split by hand; semicolons and brackets in messages are masked so that they
  # neither split nor join CMake list elements.
  file(READ "${log}" text)
  string(REPLACE ";" "<semicolon>" text "${text}")
  string(REPLACE "[" "<lbracket>" text "${text}")
  string(REPLACE "]" "<rbracket>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      continue()
    endif()
    if(line MATCHES "^[ \t]" AND NOT current STREQUAL "")
      string(APPEND current "\n${line}")
    else()
      if(NOT current STREQUAL "")
        list(APPEND entries "${current}")
      endif()
      set(current "${line}")
    endif()
  endforeach()
  if(NOT current STREQUAL "")
    list(APPEND entries "${current}")
  endif()
endif()
set(n_public 0)
set(n_pages 0)
set(n_core 0)
set(n_other 0)
set(fatal "")
foreach(entry IN LISTS entries)
  if(entry MATCHES "^[^:]*ptdp/ptdp(_mpi)?\\.h:")
    math(EXPR n_public "${n_public} + 1")
    string(APPEND fatal "${entry}\n")
  elseif(entry MATCHES "^[^:]*(docs/mainpage\\.md|docs/architecture\\.md|docs/guides/|/generated/|Doxyfile)")
    math(EXPR n_pages "${n_pages} + 1")
    string(APPEND fatal "${entry}\n")
  elseif(entry MATCHES "^[^:]*/core/" OR entry MATCHES "^<[^>]*>:[0-9]+: .*ptdp::")
    # A core header, or a member of the C++ namespace ptdp (which only the core declares) that
    # Doxygen reports under the member's name instead of its file.
    math(EXPR n_core "${n_core} + 1")
  else()
    # Warnings without a file (e.g. about a \ref whose target is missing) cannot be attributed:
    # treat them as fatal, since the reference documentation must build cleanly.
    math(EXPR n_other "${n_other} + 1")
    string(APPEND fatal "${entry}\n")
  endif()
endforeach()
message(STATUS "Doxygen warnings: public headers ${n_public}, main page/guides/generated pages/config "
               "${n_pages}, unattributed ${n_other}, core headers (internal, not fatal) ${n_core}; "
               "full log: ${log}")
if(NOT fatal STREQUAL "")
  string(REPLACE "<semicolon>" ";" fatal "${fatal}")
  string(REPLACE "<lbracket>" "[" fatal "${fatal}")
  string(REPLACE "<rbracket>" "]" fatal "${fatal}")
  message(FATAL_ERROR "Doxygen warnings about the public headers or the guides:\n${fatal}")
endif()

# The HTML holds the figures and the generated flags page.
foreach(f IN LISTS figures)
  if(NOT EXISTS "${html}/${f}")
    message(FATAL_ERROR "${html}/${f} is missing: the concepts guide does not show the schedule figures")
  endif()
endforeach()
if(NOT EXISTS "${html}/ptdp_train_flags.html")
  message(FATAL_ERROR "${html}/ptdp_train_flags.html is missing: the flags page was not generated")
endif()
file(READ "${html}/ptdp_train_flags.html" flags_html)
string(FIND "${flags_html}" "tensor-model-parallel-size" found)
if(found EQUAL -1)
  message(FATAL_ERROR "${html}/ptdp_train_flags.html does not list --tensor-model-parallel-size")
endif()
if(NOT EXISTS "${html}/architecture.html")
  message(FATAL_ERROR "${html}/architecture.html is missing: docs/architecture.md was not made a page")
endif()
message(STATUS "documentation: ${html}/index.html")

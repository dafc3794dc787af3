# Compiles every ```cpp block of one Markdown page (-fsyntax-only, with a fibra user's flags), so
# that the code the documentation shows is code that compiles against today's headers.
#
# The convention, for docs/*.md (docs/README.md says the same for writers of pages):
#
#   ```cpp          statements: the block becomes the body of a function of its own, compiled after
#                   the page's prelude and the page's `decls` blocks above it. For `pool.map(f, xs)`
#                   and the like: `pool`, the inputs and the functions a page uses without defining
#                   them are declared in the page's prelude, tests/docs/<page>.hpp (optional; it
#                   comes after tests/docs/prelude.hpp, which includes <fibra/fibra.hpp> and the
#                   standard headers the pages use).
#   ```cpp decls    namespace-scope code (functions, FIBRA_REMOTE, structs): compiled in place, in
#                   the same translation unit as the page's statement blocks, which may use it.
#   ```cpp file     a whole source file (its own #includes, maybe main): compiled on its own.
#
# GitHub and other renderers take the first word of the info string as the language, so the marker
# does not show. The statement and decls blocks of a page form one translation unit; each `file`
# block is one more. #line directives make errors point at the page's own lines (docs/pool.md:95).
# Blocks must be fenced at the start of a line: an indented ```cpp (inside a list item) is refused,
# so that no block escapes the check; so is an unknown marker. There is no marker to skip a block:
# a block that cannot compile is written as plain text (``` without a language) instead.
#
# Arguments: CXX, PAGE (the .md), SOURCE_DIR (for the page's name in messages and the preludes),
# WORK (a folder for the generated files), INCLUDES and DEFINES ('|'-separated).
cmake_minimum_required(VERSION 3.20)

file(RELATIVE_PATH page_name ${SOURCE_DIR} ${PAGE})
get_filename_component(page_stem ${PAGE} NAME_WE)
file(READ ${PAGE} text)
if(text MATCHES "\n[ \t]+```cpp")
  message(FATAL_ERROR "${page_name}: a ```cpp block is indented (in a list item?); fence it at the start of a line so that it is compiled")
endif()

# Walk the page: each block's kind, the line of its first code line, and its code.
set(rest "\n${text}")
set(line 0)  # newlines consumed so far: the fence found next is on line `line + newlines before it`
set(page_unit "")
set(n_stmt 0)
set(n_decls 0)
set(file_units "")
set(failures "")
while(TRUE)
  string(FIND "${rest}" "\n```cpp" at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${rest}" 0 ${at} before)
  string(REGEX MATCHALL "\n" nl "${before}")
  list(LENGTH nl n)
  math(EXPR line "${line} + ${n} + 1")  # the fence's line (1-based)
  math(EXPR start "${at} + 7")
  string(SUBSTRING "${rest}" ${start} -1 rest)
  string(FIND "${rest}" "\n" eol)
  string(SUBSTRING "${rest}" 0 ${eol} info)
  string(STRIP "${info}" info)
  math(EXPR eol "${eol} + 1")
  string(SUBSTRING "${rest}" ${eol} -1 rest)
  string(FIND "${rest}" "\n```" end)
  if(end EQUAL -1)
    message(FATAL_ERROR "${page_name}:${line}: the ```cpp block is empty or not closed")
  endif()
  string(SUBSTRING "${rest}" 0 ${end} code)
  string(APPEND code "\n")
  # Move past the closing fence, counting the block's lines.
  string(REGEX MATCHALL "\n" nl "${code}")
  list(LENGTH nl n)
  string(SUBSTRING "${rest}" ${end} -1 rest)
  math(EXPR first "${line} + 1")
  math(EXPR line "${line} + ${n}")  # `rest` starts with the newline that ends the last code line

  set(where "#line ${first} \"${page_name}\"\n")
  if(info STREQUAL "")
    math(EXPR n_stmt "${n_stmt} + 1")
    string(APPEND page_unit "void fibra_doc_block_at_line_${first}() {\n${where}${code}}\n")
  elseif(info STREQUAL "decls")
    math(EXPR n_decls "${n_decls} + 1")
    string(APPEND page_unit "${where}${code}")
  elseif(info STREQUAL "file")
    set(unit ${WORK}/${page_stem}_line_${first}.cpp)
    file(WRITE ${unit} "${where}${code}")
    list(APPEND file_units ${unit})
  else()
    message(FATAL_ERROR "${page_name}:${line}: unknown marker '```cpp ${info}': use ```cpp (statements), ```cpp decls or ```cpp file (see tests/docs/check_blocks.cmake)")
  endif()
endwhile()

# The flags of a fibra user.
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/FibraUserFlags.cmake)
set(args -std=c++20 -fsyntax-only -Wall -Wextra -Wno-unused-variable -Wno-unused-but-set-variable
    -Wno-missing-field-initializers)  # designated initializers name only the fields they set
fibra_user_flags(args "${INCLUDES}" "${DEFINES}")

set(units ${file_units})
if(n_stmt GREATER 0 OR n_decls GREATER 0)
  set(prelude "#include \"${SOURCE_DIR}/tests/docs/prelude.hpp\"\n")
  if(EXISTS ${SOURCE_DIR}/tests/docs/${page_stem}.hpp)
    string(APPEND prelude "#include \"${SOURCE_DIR}/tests/docs/${page_stem}.hpp\"\n")
  endif()
  set(unit ${WORK}/${page_stem}_blocks.cpp)
  file(WRITE ${unit} "// The ```cpp and ```cpp decls blocks of ${page_name}, generated by tests/docs/check_blocks.cmake\n${prelude}${page_unit}")
  list(PREPEND units ${unit})
endif()

foreach(unit IN LISTS units)
  execute_process(COMMAND ${CXX} ${args} ${unit} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(APPEND failures "\n${unit} does not compile:\n${out}")
  elseif(out)
    message(STATUS "${unit}: warnings:\n${out}")
  endif()
endforeach()
list(LENGTH file_units n_files)
if(failures)
  message(NOTICE "${failures}")  # the compiler's text as it is (FATAL_ERROR would re-wrap it)
  message(FATAL_ERROR "${page_name}: a C++ block does not compile (the compiler's messages are above)")
endif()
math(EXPR n_blocks "${n_stmt} + ${n_decls} + ${n_files}")
message(STATUS "${page_name}: every C++ block compiles (${n_blocks}: ${n_stmt} of statements, ${n_decls} decls, ${n_files} whole files)")

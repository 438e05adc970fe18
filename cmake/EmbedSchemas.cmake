# Run with cmake -P: writes OUTPUT, a C file defining cmr_schema_texts[] from the .avsc
# files named in SCHEMAS (a |-separated list, in the order of cmr_msg_type_t), and
# cmr_past_schema_texts[] from those named in PAST (schemas/past/: older versions the
# codec still reads; may be empty).
set(out "/* Generated from the .avsc files of schemas/ by cmake/EmbedSchemas.cmake. Do not edit. */\n")
string(APPEND out "#include \"msg_desc.h\"\n\n")

# Appends `static const char <prefix>_<i>[] = {...};` for each file; sets <count_var>.
function(embed_texts files prefix count_var)
  set(i 0)
  foreach(f IN LISTS files)
    file(READ ${f} hex HEX)
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
    string(APPEND out "static const char ${prefix}_${i}[] = {${hex}0x00};\n")
    math(EXPR i "${i} + 1")
  endforeach()
  set(out "${out}" PARENT_SCOPE)
  set(${count_var} ${i} PARENT_SCOPE)
endfunction()

# Appends the array of pointers to texts <prefix>_0 .. <prefix>_<n-1>.
function(embed_array decl prefix n)
  string(APPEND out "\n${decl} = {\n")
  set(j 0)
  while(j LESS n)
    string(APPEND out "    ${prefix}_${j},\n")
    math(EXPR j "${j} + 1")
  endwhile()
  if(n EQUAL 0)
    string(APPEND out "    0,\n")
  endif()
  string(APPEND out "};\n")
  set(out "${out}" PARENT_SCOPE)
endfunction()

string(REPLACE "|" ";" SCHEMAS "${SCHEMAS}")
string(REPLACE "|" ";" PAST "${PAST}")
embed_texts("${SCHEMAS}" schema n_current)
embed_texts("${PAST}" past n_past)
embed_array("const char *const cmr_schema_texts[CMR_MSG__COUNT]" schema ${n_current})
embed_array("const char *const cmr_past_schema_texts[]" past ${n_past})
string(APPEND out "const size_t cmr_past_schema_count = ${n_past};\n")
file(WRITE ${OUTPUT}.tmp "${out}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUTPUT}.tmp ${OUTPUT})

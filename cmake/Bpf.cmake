# clang -target bpf -> .bpf.o -> bpftool gen skeleton, as libbpf-bootstrap does.
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

set(GPUSCOPE_GEN_DIR ${CMAKE_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${GPUSCOPE_GEN_DIR})
set(VMLINUX_BTF /sys/kernel/btf/vmlinux CACHE FILEPATH "BTF used to generate vmlinux.h")
add_custom_command(
  OUTPUT ${GPUSCOPE_GEN_DIR}/vmlinux.h
  COMMAND ${BPFTOOL} btf dump file ${VMLINUX_BTF} format c > ${GPUSCOPE_GEN_DIR}/vmlinux.h
  COMMENT "Generating vmlinux.h from ${VMLINUX_BTF}")
add_custom_target(vmlinux_h DEPENDS ${GPUSCOPE_GEN_DIR}/vmlinux.h)

# gpuscope_bpf(NAME SOURCE): builds NAME.bpf.o and NAME.skel.h; adds target NAME_skel.
function(gpuscope_bpf name src)
  set(obj ${GPUSCOPE_GEN_DIR}/${name}.bpf.o)
  set(skel ${GPUSCOPE_GEN_DIR}/${name}.skel.h)
  get_filename_component(abs ${src} ABSOLUTE)
  get_filename_component(dir ${abs} DIRECTORY)
  file(GLOB_RECURSE common_headers ${PROJECT_SOURCE_DIR}/src/common/*.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Wno-unused-function
            -I${GPUSCOPE_GEN_DIR} -I${PROJECT_SOURCE_DIR}/src -I${dir} -c ${abs} -o ${obj}
    DEPENDS ${abs} ${GPUSCOPE_GEN_DIR}/vmlinux.h ${common_headers}
    IMPLICIT_DEPENDS C ${abs}
    COMMENT "BPF ${name}")
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "Skeleton ${name}")
  add_custom_target(${name}_skel DEPENDS ${skel})
endfunction()

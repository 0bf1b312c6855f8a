/* Prints the CPython layout offsets gpuscope's interpreter walk uses (src/python/py_offsets.cpp),
 * from the interpreter's own internal headers. Run once per supported minor version:
 *   cc -DPy_BUILD_CORE -I/usr/include/python3.11 tools/py_offsets.c -o /tmp/o && /tmp/o
 * and copy the row into the table. Not part of the build: the headers are not a dependency. */
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_frame.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"

int main(void) {
  printf("version %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  printf("runtime_interpreters_head %zu\n", offsetof(_PyRuntimeState, interpreters.head));
  printf("interp_threads_head %zu\n", offsetof(PyInterpreterState, threads.head));
  printf("tstate_next %zu\n", offsetof(PyThreadState, next));
  printf("tstate_native_thread_id %zu\n", offsetof(PyThreadState, native_thread_id));
#if PY_MINOR_VERSION <= 12
  printf("tstate_cframe %zu\n", offsetof(PyThreadState, cframe));
  printf("cframe_current_frame %zu\n", offsetof(_PyCFrame, current_frame));
  printf("frame_code %zu\n", offsetof(_PyInterpreterFrame, f_code));
  printf("frame_instr %zu\n", offsetof(_PyInterpreterFrame, prev_instr));
#else
  printf("tstate_current_frame %zu\n", offsetof(PyThreadState, current_frame));
  printf("frame_code %zu\n", offsetof(_PyInterpreterFrame, f_executable));
  printf("frame_instr %zu\n", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
  printf("frame_previous %zu\n", offsetof(_PyInterpreterFrame, previous));
  printf("frame_owner %zu\n", offsetof(_PyInterpreterFrame, owner));
#if PY_MINOR_VERSION == 11
  printf("frame_is_entry %zu\n", offsetof(_PyInterpreterFrame, is_entry));
#endif
  printf("code_filename %zu\n", offsetof(PyCodeObject, co_filename));
  printf("code_name %zu\n", offsetof(PyCodeObject, co_name));
  printf("code_qualname %zu\n", offsetof(PyCodeObject, co_qualname));
  printf("code_linetable %zu\n", offsetof(PyCodeObject, co_linetable));
  printf("code_firstlineno %zu\n", offsetof(PyCodeObject, co_firstlineno));
  printf("code_adaptive %zu\n", offsetof(PyCodeObject, co_code_adaptive));
  printf("ascii_size %zu\n", sizeof(PyASCIIObject));
  printf("compact_size %zu\n", sizeof(PyCompactUnicodeObject));
  printf("compact_utf8 %zu\n", offsetof(PyCompactUnicodeObject, utf8));
  printf("compact_utf8_length %zu\n", offsetof(PyCompactUnicodeObject, utf8_length));
  printf("unicode_state %zu\n", offsetof(PyASCIIObject, state));
  printf("unicode_length %zu\n", offsetof(PyASCIIObject, length));
  printf("bytes_size %zu\n", offsetof(PyBytesObject, ob_base.ob_size));
  printf("bytes_sval %zu\n", offsetof(PyBytesObject, ob_sval));
  printf("object_type %zu\n", offsetof(PyObject, ob_type));
  return 0;
}

/* placeholder: replaced by the loader */
#include "engine/model.h"
#include <string.h>
size_t eng_dtype_size(int32_t dtype) { (void)dtype; return 0; }
const char *eng_dtype_name(int32_t dtype) { (void)dtype; return "UNKNOWN"; }
int eng_graph_load(const char *dir, eng_graph **out, eng_diag *diag) { *out = NULL; eng_diag_add(diag, "%s: loader not built yet", dir); return -1; }
void eng_graph_free(eng_graph *g) { (void)g; }

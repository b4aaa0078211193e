/* Checks that the header and the library agree on their version:
 * TIERMEM_VERSION equals tm_version(), and the MAJOR/MINOR/PATCH macros spell
 * the same string. Prints "version_client: ok VERSION" on success. */
#include <stdio.h>
#include <string.h>

#include "tiermem.h"

int main(void) {
    const char *lib = tm_version();
    if (lib == NULL) {
        fprintf(stderr, "version_client: FAIL tm_version() returned NULL\n");
        return 1;
    }
    if (strcmp(lib, TIERMEM_VERSION) != 0) {
        fprintf(stderr, "version_client: FAIL header %s, library %s\n", TIERMEM_VERSION, lib);
        return 1;
    }
    char parts[64];
    snprintf(parts, sizeof parts, "%d.%d.%d", TIERMEM_VERSION_MAJOR, TIERMEM_VERSION_MINOR,
             TIERMEM_VERSION_PATCH);
    if (strcmp(parts, TIERMEM_VERSION) != 0) {
        fprintf(stderr, "version_client: FAIL the MAJOR/MINOR/PATCH macros give %s, TIERMEM_VERSION is %s\n",
                parts, TIERMEM_VERSION);
        return 1;
    }
    printf("version_client: ok %s\n", lib);
    return 0;
}

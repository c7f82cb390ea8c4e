/*
 * fuzz_cpulist.c — libFuzzer target for the CPU-list parser that every sysfs list and
 * a pool's `cpus` go through ("0-3,8,10-11"; topology_discovery.c, parse_list). It is
 * static, so the file is included here. The parser must never read past the string or
 * write past its set (AddressSanitizer), and must accept exactly the lists whose every
 * range is ascending and below SPINDLE_MAX_CPUS: a reference parser written for the
 * check decides, and a disagreement aborts.
 */
#include "../../Sources/CSpindle/topology_discovery.c"

#include <ctype.h>

/* The grammar, independently: items of digits or digits-digits, separated by commas,
 * blanks or newlines, each number below SPINDLE_MAX_CPUS, each range ascending. */
static int reference(const char *s, uint8_t *set) {
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == ',') p++;
        if (!*p) return 0;
        if (!isdigit((unsigned char)*p)) return -1;
        long a = 0;
        while (isdigit((unsigned char)*p)) {
            a = a * 10 + (*p++ - '0');
            if (a >= SPINDLE_MAX_CPUS) return -1;
        }
        long b = a;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p)) return -1;
            b = 0;
            while (isdigit((unsigned char)*p)) {
                b = b * 10 + (*p++ - '0');
                if (b >= SPINDLE_MAX_CPUS) return -1;
            }
            if (b < a) return -1;
        }
        for (long i = a; i <= b; i++) set[i] = 1;
        if (*p && *p != ',' && *p != '\n' && *p != ' ' && *p != '\t') return -1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1); /* exactly the input: an overread is caught */
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    static uint8_t got[SPINDLE_MAX_CPUS], want[SPINDLE_MAX_CPUS];
    memset(got, 0, sizeof got);
    memset(want, 0, sizeof want);
    int rc = parse_list(s, got), ref = reference(s, want);
    if (rc != ref || (rc == 0 && memcmp(got, want, sizeof got) != 0)) {
        fprintf(stderr, "fuzz_cpulist: parse_list says %d, the grammar %d, for \"%s\"\n", rc, ref, s);
        abort();
    }
    free(s);
    return 0;
}

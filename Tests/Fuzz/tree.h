/*
 * tree.h — the fuzzers' fake trees: an input is a list of fields separated by NUL bytes,
 * field i holding the content of the i-th path of a fixed table, written under a
 * directory in /dev/shm (or $TMPDIR). A field that is exactly "\x01" leaves the file
 * out, "\x02" makes it a directory; missing trailing fields leave their files out. Only
 * the files whose content changed since the last input are rewritten, so an execution
 * costs a file or two, not a tree. The tree is removed when the process exits.
 */
#ifndef SPINDLE_FUZZ_TREE_H
#define SPINDLE_FUZZ_TREE_H

#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TREE_MAX_PATHS 64

/* A promise of the reader under test; a broken one aborts, which libFuzzer reports with
 * the input. */
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "broken promise: %s (%s:%d)\n", #cond, __FILE__, __LINE__);      \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

typedef struct tree {
    char root[256];
    const char *const *paths;
    size_t npaths;
    /* What each path holds now: NULL absent, (char *)1 a directory, else its content. */
    char *now[TREE_MAX_PATHS];
} tree;

#define TREE_DIR ((char *)1)

static void tree_mkdirs(const char *full) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", full);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
}

static void tree_remove(const char *full) {
    if (unlink(full) != 0 && errno == EISDIR) rmdir(full);
    rmdir(full);
}

static int tree_unlink_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* The tree of this process, removed when it exits. */
static char tree_root_to_remove[256];
static void tree_remove_at_exit(void) {
    if (tree_root_to_remove[0]) nftw(tree_root_to_remove, tree_unlink_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void tree_init(tree *t, const char *name, const char *const *paths, size_t npaths) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(t->root, sizeof t->root, "%s/spindle-fuzz-%s-%d", base, name, (int)getpid());
    mkdir(t->root, 0755);
    snprintf(tree_root_to_remove, sizeof tree_root_to_remove, "%s", t->root);
    atexit(tree_remove_at_exit);
    t->paths = paths;
    t->npaths = npaths;
    memset(t->now, 0, sizeof t->now);
}

/* Makes the tree hold what `data` describes. */
static void tree_set(tree *t, const uint8_t *data, size_t size) {
    size_t at = 0;
    for (size_t i = 0; i < t->npaths; i++) {
        const char *want = NULL;
        size_t len = 0;
        char *field = NULL;
        if (at <= size) {
            const uint8_t *end = at < size ? memchr(data + at, 0, size - at) : NULL;
            len = end ? (size_t)(end - (data + at)) : size - at;
            if (at < size || end) {
                field = malloc(len + 1);
                memcpy(field, data + at, len);
                field[len] = 0;
            }
            at += len + 1;
        }
        if (field && len == 1 && field[0] == 1) {
            want = NULL;
        } else if (field && len == 1 && field[0] == 2) {
            want = TREE_DIR;
        } else {
            want = field;
        }
        char full[1024];
        snprintf(full, sizeof full, "%s/%s", t->root, t->paths[i]);
        char *had = t->now[i];
        bool same = (had == want) || (had && want && had != TREE_DIR && want != TREE_DIR && strcmp(had, want) == 0);
        if (!same) {
            if (had) tree_remove(full);
            if (want == TREE_DIR) {
                tree_mkdirs(full);
                mkdir(full, 0755);
            } else if (want) {
                tree_mkdirs(full);
                FILE *f = fopen(full, "w");
                if (f) {
                    fwrite(want, 1, strlen(want), f);
                    fclose(f);
                }
            }
            if (had && had != TREE_DIR) free(had);
            t->now[i] = want == TREE_DIR ? TREE_DIR : want ? strdup(want) : NULL;
        }
        if (field) free(field);
    }
}

#endif

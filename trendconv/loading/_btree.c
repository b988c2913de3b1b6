/* trend_data's read indexes as SQLite b-tree pages: the C twin of trendconv/loading/btree.py, which says what is
 * done and why. Both write the same pages, byte for byte; keep them in step.
 *
 *     write_indexes(fd, page_size, usable, small_ints, root, entries, first_page, keys=None, count=False)
 *         -> [root, ...] | ([root, ...], [distinct, ...]) | None
 *
 * FD is the database file open for reading and writing, of FIRST_PAGE - 1 pages; ROOT the first page of
 * trend_data's b-tree; ENTRIES one sequence per index: the positions in the table's record of the index entry's
 * columns, in the entry's order. The pages are written to FD from page FIRST_PAGE on, one index after the
 * other. None, with nothing written, where the keys do not fit the plan: one that is not a non-negative integer
 * within its cell's local bytes, more than 64 bits of key, more than MAX_ROWS rows, or pages this process cannot
 * have written. KEYS, where given, are every row's key, and the table's pages are then not read (btree.py says how).
 * With COUNT, the roots come with the distinct values of each prefix of each entry's keys, and of the table's (its
 * columns read, in the record's order): the counts sqlite_stat1 is made of (btree.py, "Counting").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROWS (1 << 23) /* btree.MAX_ROWS */
#define MAX_COLUMNS 8      /* a record then has fewer than 128 bytes: its size is a one-byte varint */
#define MAX_INDEXES 8
#define BATCH 256 /* pages to a write */
#define WINDOW 64 /* pages to a read, where they follow each other */
#define MAX_DEPTH 32
#define MAX_POSITION 64 /* the columns of a record that can be read: trend_data has at most 18 */
#define LEAF 0x0A
#define INTERIOR 0x02
#define LEAF_HEADER 8
#define INTERIOR_HEADER 12

typedef struct {
    int fd;          /* the database file, read with pread (not mapped: its pages are not the loader's memory) */
    uint8_t *page;   /* WINDOW pages: a run of leaves that follow each other in the file is read at once */
    size_t size;     /* of the file, in bytes */
    size_t page_size, usable;
    int columns, needed; /* needed: 1 + the last column read */
    int position[MAX_COLUMNS];
} Table;

/* BYTES from OFFSET of the table's file into its buffer; 0 where they cannot be read. A signal (Ctrl-C) during the
 * read is handled by Python when the call returns: the read goes on. */
static int read_at(Table *table, size_t bytes, uint32_t page) {
    uint8_t *at = table->page;
    off_t offset = (off_t)(page - 1) * (off_t)table->page_size;
    while (bytes) {
        ssize_t done = pread(table->fd, at, bytes, offset);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) return 0;
        at += done, offset += done, bytes -= (size_t)done;
    }
    return 1;
}

static uint32_t get4(const uint8_t *at) { return (uint32_t)at[0] << 24 | at[1] << 16 | at[2] << 8 | at[3]; }
static unsigned get2(const uint8_t *at) { return (unsigned)at[0] << 8 | at[1]; }

static const uint8_t *varint(const uint8_t *at, const uint8_t *end, uint64_t *value) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (at >= end) return NULL;
        v = v << 7 | (*at & 0x7F);
        if (*at++ < 0x80) {
            *value = v;
            return at;
        }
    }
    if (at >= end) return NULL;
    *value = v << 8 | *at++;
    return at;
}

static size_t local_bytes(uint64_t payload, size_t usable) {
    uint64_t most = (usable - 12) * 64 / 255 - 23, least = (usable - 12) * 32 / 255 - 23;
    if (payload <= most) return (size_t)payload;
    uint64_t kept = least + (payload - least) % (usable - 4);
    return (size_t)(kept <= most ? kept : least);
}

static size_t serial_size(uint64_t serial) {
    static const size_t sizes[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    return serial >= 12 ? (size_t)((serial - 12) / 2) : sizes[serial];
}

/* The integers at the table's columns of the record in the cell whose payload size starts at AT; 0 if one is
 * not a non-negative integer within the cell's local bytes. */
static int cell_values(const Table *table, const uint8_t *at, const uint8_t *page_end, int64_t *values) {
    uint64_t payload, header, serial;
    int64_t starts[MAX_POSITION];
    uint64_t serials[MAX_POSITION];
    at = varint(at, page_end, &payload);
    if (!at) return 0;
    const uint8_t *end = at + local_bytes(payload, table->usable);
    if (end > page_end) end = page_end;
    const uint8_t *position = varint(at, end, &header);
    if (!position || header > (uint64_t)(end - at)) return 0;
    const uint8_t *body = at + header;
    int count = 0;
    size_t start = 0;
    while (position < body && count < table->needed) { /* the columns after the last one needed are not read */
        position = varint(position, body, &serial);
        if (!position) return 0;
        serials[count] = serial;
        starts[count++] = (int64_t)start;
        start += serial_size(serial);
    }
    for (int i = 0; i < table->columns; i++) {
        int column = table->position[i];
        if (column >= count) return 0;
        serial = serials[column];
        if (serial == 8 || serial == 9) {
            values[i] = (int64_t)serial - 8;
            continue;
        }
        if (serial < 1 || serial > 6) return 0;
        size_t size = serial_size(serial);
        const uint8_t *value = body + starts[column];
        if (value + size > end) return 0;
        int64_t v = (int8_t)value[0]; /* big-endian two's complement, sign from the first byte */
        for (size_t b = 1; b < size; b++) v = (int64_t)((uint64_t)v << 8 | value[b]);
        if (v < 0) return 0;
        values[i] = v;
    }
    return 1;
}

typedef int (*Visit)(void *context, const int64_t *values);

/* Pages still to read, with their depths. */
typedef struct {
    uint32_t *pages, *depths;
    size_t count, capacity;
} Stack;

static int push(Stack *stack, uint32_t page, uint32_t depth) {
    if (stack->count == stack->capacity) {
        size_t capacity = stack->capacity ? stack->capacity * 2 : 1024;
        uint32_t *pages = realloc(stack->pages, capacity * sizeof *pages);
        if (pages) stack->pages = pages;
        uint32_t *depths = realloc(stack->depths, capacity * sizeof *depths);
        if (depths) stack->depths = depths;
        if (!pages || !depths) return 0;
        stack->capacity = capacity;
    }
    stack->pages[stack->count] = page, stack->depths[stack->count++] = depth;
    return 1;
}

typedef struct {
    Table *table;
    Visit visit;
    void *context;
    Stack pending, leaves; /* pages to read one by one, and leaves to read in file order */
    int64_t leaf_depth;    /* -1 until the first leaf is met: every leaf of a b-tree is as deep */
} Walk;

static int child(Walk *w, uint32_t page, uint32_t depth) {
    return (int64_t)depth == w->leaf_depth ? push(&w->leaves, page, depth) : push(&w->pending, page, depth);
}

/* VISIT the rows of the cells of the page at DATA; the children of an interior page onto PENDING (at DEPTH + 1), or
 * onto LEAVES where they are at the leaves' depth. 0 where the page or a row is not as planned. */
static int visit_page(Walk *w, const uint8_t *data, uint32_t depth) {
    const uint8_t *page_end = data + w->table->usable;
    int kind = data[0];
    if (kind != LEAF && kind != INTERIOR) return 0;
    if (kind == LEAF && w->leaf_depth < 0) w->leaf_depth = depth;
    if ((kind == LEAF) != ((int64_t)depth == w->leaf_depth)) return 0; /* not a b-tree SQLite writes */
    unsigned cells = get2(data + 3), header = kind == LEAF ? LEAF_HEADER : INTERIOR_HEADER;
    if (kind == INTERIOR && !child(w, get4(data + 8), depth + 1)) return 0;
    int64_t values[MAX_COLUMNS];
    for (unsigned cell = 0; cell < cells; cell++) {
        if (header + 2 * cell + 2 > w->table->usable) return 0;
        const uint8_t *at = data + get2(data + header + 2 * cell);
        if (kind == INTERIOR) {
            if (at + 4 > page_end || !child(w, get4(at), depth + 1)) return 0;
            at += 4;
        }
        if (at >= page_end || !cell_values(w->table, at, page_end, values) || !w->visit(w->context, values)) return 0;
    }
    return 1;
}

static int compare_pages(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int in_file(const Table *table, uint32_t page) {
    return page >= 2 && (size_t)page * table->page_size <= table->size;
}

/* The leaves gathered, in the order of their pages in the file, read WINDOW pages at a time where they follow
 * each other (the rows' order does not matter: their keys are sorted after). */
static int visit_leaves(Walk *w) {
    Table *table = w->table;
    uint32_t *leaves = w->leaves.pages;
    size_t count = w->leaves.count;
    qsort(leaves, count, sizeof *leaves, compare_pages);
    for (size_t i = 0; i < count;) {
        size_t run = 1;
        while (i + run < count && run < WINDOW && leaves[i + run] == leaves[i] + run) run++;
        if (!in_file(table, leaves[i] + (uint32_t)run - 1) || !in_file(table, leaves[i])) return 0;
        size_t bytes = run * table->page_size;
        if (!read_at(table, bytes, leaves[i])) return 0; /* SQLite, building the index instead, meets it too */
        for (size_t j = 0; j < run; j++)
            if (!visit_page(w, table->page + j * table->page_size, (uint32_t)w->leaf_depth)) return 0;
        i += run;
    }
    return 1;
}

/* VISIT the values of every row of the b-tree at ROOT; 0 where a page or a row is not as planned. The pages
 * above the leaves are read one by one as the tree is walked down; the leaves, most of the pages, after. */
static int walk(Table *table, uint32_t root, Visit visit, void *context) {
    Walk w = {table, visit, context, {0}, {0}, -1};
    int ok = push(&w.pending, root, 0);
    while (ok && w.pending.count) {
        uint32_t page = w.pending.pages[--w.pending.count], depth = w.pending.depths[w.pending.count];
        ok = in_file(table, page) && depth <= MAX_DEPTH && read_at(table, table->page_size, page) &&
             visit_page(&w, table->page, depth);
    }
    ok = ok && visit_leaves(&w);
    free(w.pending.pages), free(w.pending.depths), free(w.leaves.pages), free(w.leaves.depths);
    return ok;
}

/* ---- the keys: counted and bounded, then packed, then sorted */

typedef struct {
    int columns;  /* of the table's record read: Table.position */
    size_t rows;
    int64_t most[MAX_COLUMNS];
    int entry, order[MAX_COLUMNS], width[MAX_COLUMNS]; /* the entry's columns (Table.position indexes), widths */
    uint64_t *keys;
    size_t capacity; /* of KEYS, while the measuring walk gathers them */
    int gathering;   /* whether it still does: each key packed in the columns' order, `width` bits a column */
} Keys;

static uint64_t packed(const Keys *keys, const int64_t *values);

/* The measuring walk keeps each key, packed with a fixed width a column (16 bits for trend_data's four), while
 * every value fits it: the first index's keys are then these repacked, and the table is read once, not twice. */
static void gather(Keys *keys, const int64_t *values) {
    for (int i = 0; i < keys->columns; i++)
        if ((uint64_t)values[i] >> keys->width[i]) keys->gathering = 0;
    if (keys->gathering && keys->rows > keys->capacity) {
        size_t capacity = keys->capacity ? keys->capacity * 2 : 65536;
        uint64_t *more = realloc(keys->keys, capacity * sizeof *more);
        if (more)
            keys->keys = more, keys->capacity = capacity;
        else
            keys->gathering = 0;
    }
    if (keys->gathering)
        keys->keys[keys->rows - 1] = packed(keys, values);
    else
        free(keys->keys), keys->keys = NULL, keys->capacity = 0;
}

static int measure(void *context, const int64_t *values) {
    Keys *keys = context;
    if (++keys->rows > MAX_ROWS) return 0;
    for (int i = 0; i < keys->columns; i++)
        if (values[i] > keys->most[i]) keys->most[i] = values[i];
    if (keys->gathering) gather(keys, values);
    return 1;
}

static uint64_t packed(const Keys *keys, const int64_t *values) {
    uint64_t key = 0;
    for (int i = 0; i < keys->entry; i++) key = key << keys->width[i] | (uint64_t)values[keys->order[i]]; /* < 64 */
    return key;
}

static int pack(void *context, const int64_t *values) {
    Keys *keys = context;
    keys->keys[keys->rows++] = packed(keys, values);
    return 1;
}

/* FROM's keys packed again in KEYS's entry order, into KEYS's array (which may be FROM's): an index over the same
 * columns needs no second reading of the table. */
static void repack(Keys *keys, const Keys *from) {
    int64_t values[MAX_COLUMNS];
    for (size_t r = 0; r < keys->rows; r++) {
        uint64_t key = from->keys[r];
        for (int i = from->entry - 1; i >= 0; i--) {
            values[from->order[i]] = (int64_t)(key & ((UINT64_C(1) << from->width[i]) - 1));
            key >>= from->width[i];
        }
        keys->keys[r] = packed(keys, values);
    }
}

/* Whether the entries A and B have the same columns, in any order. */
static int same_columns(const Keys *a, const Keys *b) {
    if (a->entry != b->entry) return 0;
    for (int i = 0; i < a->entry; i++) {
        int found = 0;
        for (int j = 0; j < b->entry; j++) found |= a->order[i] == b->order[j];
        if (!found) return 0;
    }
    return 1;
}

static int bit_length(uint64_t value) {
    int bits = 0;
    while (value) bits++, value >>= 1;
    return bits;
}

#define DIGIT 11 /* bits a pass of the sort: 26 bits of key (32 x 4 x 16) take three */

static void radix_sort(uint64_t *keys, uint64_t *spare, size_t rows, int bits) {
    size_t count[(1 << DIGIT) + 1]; /* 16 KiB of stack; not static: builds may run on several threads */
    const uint64_t mask = (1 << DIGIT) - 1;
    for (int shift = 0; shift < bits; shift += DIGIT) {
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < rows; i++) count[((keys[i] >> shift) & mask) + 1]++;
        if (count[((keys[0] >> shift) & mask) + 1] == rows) continue; /* one digit for all: nothing moves */
        for (size_t d = 0; d < mask + 1; d++) count[d + 1] += count[d];
        for (size_t i = 0; i < rows; i++) spare[count[(keys[i] >> shift) & mask]++] = keys[i];
        memcpy(keys, spare, rows * sizeof *keys);
    }
}

/* How many distinct values each prefix of KEYS's sorted keys takes (OUT[p]: its first p + 1 columns), in one pass:
 * where two neighbours differ, they differ in every prefix from the first column they differ in on. */
static void prefix_counts(const Keys *keys, size_t *out) {
    int shift[MAX_COLUMNS], bits = 0;
    for (int p = 0; p < keys->entry; p++) bits += keys->width[p];
    for (int p = 0; p < keys->entry; p++) shift[p] = bits -= keys->width[p], out[p] = keys->rows ? 1 : 0;
    for (size_t r = 1; r < keys->rows; r++) {
        uint64_t diff = keys->keys[r] ^ keys->keys[r - 1];
        for (int p = 0; p < keys->entry; p++)
            if (shift[p] < 64 && diff >> shift[p]) out[p]++;
    }
}

/* ---- the pages */

typedef struct {
    size_t page_size, usable;
    int small_ints, columns;
    int width[MAX_COLUMNS];
    uint32_t first_page; /* of the index being written */
    int fd, error;       /* error: the errno of a failed write */
    uint8_t *batch;      /* BATCH pages */
    size_t count, buffered; /* pages made, and of those not yet written */
} Pages;

/* The record of KEY's values into OUT (at least 1 + 9 * MAX_COLUMNS bytes); its size. */
static size_t payload(const Pages *p, uint64_t key, uint8_t *out) {
    uint64_t values[MAX_COLUMNS];
    for (int i = p->columns - 1; i >= 0; i--) {
        values[i] = key & ((UINT64_C(1) << p->width[i]) - 1); /* a non-negative int64 has at most 63 bits */
        key >>= p->width[i];
    }
    size_t size = 1 + (size_t)p->columns;
    out[0] = (uint8_t)size;
    for (int i = 0; i < p->columns; i++) {
        uint64_t v = values[i];
        int serial, bytes;
        if (p->small_ints && v <= 1)
            serial = 8 + (int)v, bytes = 0;
        else if (v <= 0x7F)
            serial = 1, bytes = 1;
        else if (v <= 0x7FFF)
            serial = 2, bytes = 2;
        else if (v <= 0x7FFFFF)
            serial = 3, bytes = 3;
        else if (v <= 0x7FFFFFFF)
            serial = 4, bytes = 4;
        else if (v <= UINT64_C(0x7FFFFFFFFFFF))
            serial = 5, bytes = 6;
        else
            serial = 6, bytes = 8;
        out[1 + i] = (uint8_t)serial;
        for (int b = bytes - 1; b >= 0; b--) out[size + (size_t)(bytes - 1 - b)] = (uint8_t)(v >> (8 * b));
        size += (size_t)bytes;
    }
    return size;
}

/* The size of KEY's record, as `payload` writes it. */
static size_t payload_size(const Pages *p, uint64_t key) {
    size_t size = 1 + (size_t)p->columns;
    for (int i = p->columns - 1; i >= 0; i--) {
        uint64_t v = key & ((UINT64_C(1) << p->width[i]) - 1);
        key >>= p->width[i];
        size += (p->small_ints && v <= 1) ? 0
                : v <= 0x7F                  ? 1
                : v <= 0x7FFF                ? 2
                : v <= 0x7FFFFF              ? 3
                : v <= 0x7FFFFFFF            ? 4
                : v <= UINT64_C(0x7FFFFFFFFFFF) ? 6
                                             : 8;
    }
    return size;
}

/* The pages made and not yet written, written to their place in the file. */
static int flush(Pages *p) {
    const uint8_t *at = p->batch;
    size_t left = p->buffered * p->page_size;
    off_t offset = (off_t)(p->first_page - 1 + p->count - p->buffered) * (off_t)p->page_size;
    while (left) {
        ssize_t done = pwrite(p->fd, at, left, offset);
        if (done < 0 && errno == EINTR) continue; /* a signal: Python handles it when the call returns */
        if (done < 0) {
            p->error = errno;
            return 0;
        }
        at += done, offset += done, left -= (size_t)done;
    }
    p->buffered = 0;
    return 1;
}

static uint8_t *new_page(Pages *p) {
    if (p->buffered == BATCH && !flush(p)) return NULL;
    uint8_t *page = p->batch + p->buffered++ * p->page_size;
    p->count++;
    memset(page, 0, p->page_size);
    return page;
}

static void put2(uint8_t *at, size_t value) { at[0] = (uint8_t)(value >> 8), at[1] = (uint8_t)value; }
static void put4(uint8_t *at, uint32_t value) {
    put2(at, value >> 16);
    put2(at + 2, value & 0xFFFF);
}

/* A page of the cells of KEYS (with CHILDREN's left pointers and RIGHT, for an interior page); its number or 0. */
static uint32_t emit(Pages *p, int kind, const uint64_t *keys, const uint32_t *children, size_t cells, uint32_t right) {
    uint8_t *page = new_page(p);
    if (!page) return 0;
    size_t header = kind == LEAF ? LEAF_HEADER : INTERIOR_HEADER, top = p->usable;
    uint8_t record[1 + 9 * MAX_COLUMNS];
    for (size_t i = 0; i < cells; i++) {
        size_t size = payload(p, keys[i], record), cell = size + 1 + (kind == LEAF ? 0 : 4);
        top -= cell;
        uint8_t *at = page + top;
        if (kind == INTERIOR) put4(at, children[i]), at += 4;
        *at++ = (uint8_t)size;
        memcpy(at, record, size);
        put2(page + header + 2 * i, top);
    }
    page[0] = (uint8_t)kind;
    put2(page + 3, cells);
    put2(page + 5, top % 65536);
    if (kind == INTERIOR) put4(page + 8, right);
    return p->first_page + (uint32_t)p->count - 1;
}

typedef struct {
    uint32_t *children;
    uint64_t *dividers;
    size_t count, dividers_count; /* children, dividers */
} Level;

static int grow(Level *level, size_t rows) {
    level->children = malloc((rows + 1) * sizeof *level->children);
    level->dividers = malloc((rows + 1) * sizeof *level->dividers);
    level->count = level->dividers_count = 0;
    return level->children && level->dividers;
}

static void drop(Level *level) {
    free(level->children);
    free(level->dividers);
}

static int leaves(Pages *p, const uint64_t *keys, size_t rows, Level *out) {
    size_t start = 0;
    while (start < rows) {
        size_t end = start, used = LEAF_HEADER, cell;
        while (end < rows && used + 2 + (cell = 1 + payload_size(p, keys[end])) <= p->usable) used += 2 + cell, end++;
        if (end == rows) {
            uint32_t page = emit(p, LEAF, keys + start, NULL, end - start, 0);
            if (!page) return 0;
            out->children[out->count++] = page;
            break;
        }
        if (end == rows - 1) end--; /* the last key alone would be the divider: the last leaf gets a key */
        uint32_t page = emit(p, LEAF, keys + start, NULL, end - start, 0);
        if (!page) return 0;
        out->children[out->count++] = page;
        out->dividers[out->dividers_count++] = keys[end];
        start = end + 1;
    }
    return 1;
}

static int interiors(Pages *p, const Level *in, Level *out) {
    size_t first = 0;
    while (first < in->count) {
        size_t last = first, used = INTERIOR_HEADER, cell;
        while (last + 1 < in->count && used + 2 + (cell = 5 + payload_size(p, in->dividers[last])) <= p->usable)
            used += 2 + cell, last++;
        if (last + 1 == in->count) {
            uint32_t page =
                emit(p, INTERIOR, in->dividers + first, in->children + first, last - first, in->children[last]);
            if (!page) return 0;
            out->children[out->count++] = page;
            break;
        }
        if (last + 2 == in->count) last--; /* the last child alone would make a page without a cell */
        uint32_t page = emit(p, INTERIOR, in->dividers + first, in->children + first, last - first, in->children[last]);
        if (!page) return 0;
        out->children[out->count++] = page;
        out->dividers[out->dividers_count++] = in->dividers[last];
        first = last + 1;
    }
    return 1;
}

/* The pages of the sorted KEYS; the root's number, or 0 where memory ran out. */
static uint32_t build(Pages *p, const uint64_t *keys, size_t rows) {
    Level level, above;
    /* a leaf holds at least 6 keys: (480 - 8) / (2 + 1 + 1 + 9 * MAX_COLUMNS), for the smallest page planned */
    int ok = grow(&level, rows / 4 + 2) && leaves(p, keys, rows, &level);
    while (ok && level.count > 1) {
        ok = grow(&above, level.count) && interiors(p, &level, &above);
        drop(&level);
        level = above;
    }
    uint32_t root = 0;
    if (ok && level.count == 1)
        root = level.children[0];
    else if (ok && rows == 0)
        root = emit(p, LEAF, NULL, NULL, 0, 0); /* no rows: the root is an empty leaf */
    drop(&level);
    return root;
}

/* The index over KEYS's entry, its keys packed and sorted, into P's file: its root, or 0 (P's error set where a
 * write failed; out of memory otherwise). */
static uint32_t write_index(Pages *p, const Keys *keys) {
    p->columns = keys->entry;
    for (int i = 0; i < keys->entry; i++) p->width[i] = keys->width[i];
    p->count = p->buffered = 0;
    uint32_t root = build(p, keys->keys, keys->rows);
    return root && flush(p) ? root : 0;
}

/* ---- the indexes one after the other, the next one's keys sorted on a second thread while one's pages are made */

typedef struct {
    Keys *keys;
    uint64_t *spare;
} Sort;

static void *sort_keys(void *context) {
    Sort *sort = context;
    int bits = 0;
    for (int i = 0; i < sort->keys->entry; i++) bits += sort->keys->width[i];
    radix_sort(sort->keys->keys, sort->spare, sort->keys->rows, bits);
    return NULL;
}

typedef struct {
    Table *table;
    uint32_t root;
    Keys *keys, *measured; /* one per index; the keys the measuring walk gathered or that were given */
    int count, from_keys;
    size_t rows;
    uint64_t *slot[2], *spare[2]; /* index K's keys go to slot K % 2 (the first holds those gathered); the two are
                                   * one where memory was short */
    Pages *pages;
    uint32_t *roots;
    size_t (*distinct)[MAX_COLUMNS]; /* with COUNT: each index's prefix counts, then the table's; else NULL */
} Indexes;

/* Index K's keys packed into their slot, from the index before it, from those gathered or given, or read from the
 * table; 0 where the table's pages are not as planned. */
static int prepare(Indexes *x, int k) {
    Keys *keys = &x->keys[k];
    keys->keys = x->slot[k % 2];
    keys->rows = x->rows;
    if (k && same_columns(keys, &x->keys[k - 1]))
        repack(keys, &x->keys[k - 1]);
    else if (!k && x->measured->gathering && (x->rows || x->from_keys)) {
        Keys gathered = *x->measured;
        gathered.keys = x->slot[0]; /* where they were gathered: repacked in place */
        repack(keys, &gathered);
    } else {
        keys->rows = 0;
        return walk(x->table, x->root, pack, keys); /* it was read once already: it reads again */
    }
    return 1;
}

/* Every index's pages written (the GIL released): 0 where one could not be. */
static int write_all(Indexes *x) {
    int ok = prepare(x, 0), ahead = 0, two = x->slot[0] != x->slot[1];
    for (int k = 0; ok && k < x->count; k++) {
        Sort sort = {&x->keys[k], x->spare[k % 2]}, next = {&x->keys[k + 1], x->spare[(k + 1) % 2]};
        if (!ahead) sort_keys(&sort);
        pthread_t helper;
        int helping = 0;
        ahead = two && k + 1 < x->count && same_columns(&x->keys[k + 1], &x->keys[k]);
        if (ahead) {
            prepare(x, k + 1); /* a repacking: it cannot fail */
            helping = pthread_create(&helper, NULL, sort_keys, &next) == 0;
            if (!helping) sort_keys(&next);
        }
        x->roots[k] = write_index(x->pages, &x->keys[k]);
        ok = x->roots[k] != 0;
        if (ok && x->distinct) prefix_counts(&x->keys[k], x->distinct[k]); /* still sorted, in their slot */
        if (helping) pthread_join(helper, NULL);
        x->pages->first_page += (uint32_t)x->pages->count;
        if (ok && !ahead && k + 1 < x->count) ok = prepare(x, k + 1);
    }
    return ok;
}

/* The table's keys in its own order (TABLE_KEYS: the columns read, in the record's order) in the last index's slot,
 * sorted, and their prefixes counted into X's last row of counts: 1; 0 where they take more than 64 bits or the
 * table's pages are not as planned. */
static int count_table(Indexes *x, Keys *table_keys) {
    const Table *table = x->table;
    Keys *last = &x->keys[x->count - 1];
    int bits = 0;
    table_keys->entry = table->columns;
    for (int i = 0; i < table->columns; i++) {
        int at = i; /* an insertion sort of the columns read by their place in the record */
        while (at > 0 && table->position[table_keys->order[at - 1]] > table->position[i])
            table_keys->order[at] = table_keys->order[at - 1], at--;
        table_keys->order[at] = i;
    }
    for (int i = 0; i < table->columns; i++)
        bits += table_keys->width[i] = bit_length((uint64_t)x->measured->most[table_keys->order[i]]);
    if (bits > 64) return 0;
    table_keys->keys = last->keys;
    table_keys->rows = x->rows;
    if (same_columns(table_keys, last))
        repack(table_keys, last); /* in place: each key is read before it is written over */
    else {
        table_keys->rows = 0;
        if (!walk(x->table, x->root, pack, table_keys)) return 0;
    }
    Sort sort = {table_keys, x->spare[(x->count - 1) % 2]};
    sort_keys(&sort);
    prefix_counts(table_keys, x->distinct[x->count]);
    return 1;
}

/* ENTRIES into KEYS's orders (indexes into TABLE's positions, the columns read, which it adds to); 0 where an
 * entry is not 1 to MAX_COLUMNS positions under MAX_POSITION or the columns read would be more than MAX_COLUMNS,
 * -1 with a Python error set. */
static int plan(PyObject *entries, Table *table, Keys *keys, int count) {
    for (int k = 0; k < count; k++) {
        PyObject *entry = PySequence_Fast(PySequence_Fast_GET_ITEM(entries, k), "an entry is a sequence");
        if (!entry) return -1;
        Py_ssize_t columns = PySequence_Fast_GET_SIZE(entry);
        int ok = columns >= 1 && columns <= MAX_COLUMNS;
        keys[k].entry = (int)columns;
        for (Py_ssize_t i = 0; ok && i < columns; i++) {
            long position = PyLong_AsLong(PySequence_Fast_GET_ITEM(entry, i));
            ok = position >= 0 && position < MAX_POSITION;
            int at = 0;
            while (ok && at < table->columns && table->position[at] != position) at++;
            if (ok && at == table->columns) {
                ok = table->columns < MAX_COLUMNS;
                if (ok) table->position[table->columns++] = (int)position;
            }
            keys[k].order[i] = at;
            if (ok && position + 1 > table->needed) table->needed = (int)position + 1;
        }
        Py_DECREF(entry);
        if (PyErr_Occurred()) return -1;
        if (!ok) return 0;
    }
    return 1;
}

/* Each entry's widths: the bits of the largest value MEASURED in each of its columns; 0 where an entry would have
 * more than 64 bits of key. */
static int widths(Keys *keys, int count, const Keys *measured) {
    for (int k = 0; k < count; k++) {
        int bits = 0;
        for (int i = 0; i < keys[k].entry; i++)
            bits += keys[k].width[i] = bit_length((uint64_t)measured->most[keys[k].order[i]]);
        if (bits > 64) return 0;
    }
    return 1;
}

/* Whether every entry holds each of the TABLE's columns read, once. */
static int entries_hold_all(const Table *table, const Keys *keys, int count) {
    for (int k = 0; k < count; k++) {
        if (keys[k].entry != table->columns) return 0;
        for (int at = 0; at < table->columns; at++) {
            int found = 0;
            for (int i = 0; i < keys[k].entry; i++) found |= keys[k].order[i] == at;
            if (!found) return 0;
        }
    }
    return 1;
}

/* The bytes of BUFFERS' keys, or -1 with a Python error set where one is not a whole number of 64-bit keys. */
static Py_ssize_t keys_bytes(PyObject *buffers) {
    Py_ssize_t bytes = 0;
    for (Py_ssize_t b = 0; b < PySequence_Fast_GET_SIZE(buffers); b++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(buffers, b), &view, PyBUF_SIMPLE) < 0) return -1;
        Py_ssize_t len = view.len;
        PyBuffer_Release(&view);
        if (len % 8) {
            PyErr_SetString(PyExc_ValueError, "a buffer of keys is not a whole number of 64-bit keys");
            return -1;
        }
        bytes += len;
    }
    return bytes;
}

/* The BUFFERS' keys copied into MEASURED, which counts them; 0 where there are more than MAX_ROWS, -1 with a
 * Python error set. */
static int copy_keys(PyObject *buffers, Keys *measured) {
    Py_ssize_t bytes = keys_bytes(buffers);
    if (bytes < 0) return -1;
    if ((size_t)bytes / 8 > MAX_ROWS) return 0;
    if (!(measured->keys = malloc((size_t)bytes + sizeof *measured->keys))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t b = 0; b < PySequence_Fast_GET_SIZE(buffers); b++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(buffers, b), &view, PyBUF_SIMPLE) < 0) return -1;
        size_t room = (size_t)bytes / 8 - measured->rows, copied = (size_t)view.len / 8; /* the GIL is held: */
        copied = copied < room ? copied : room; /* no buffer grows between the passes, but none writes past KEYS */
        memcpy(measured->keys + measured->rows, view.buf, copied * 8);
        measured->rows += copied;
        PyBuffer_Release(&view);
    }
    return 1;
}

/* The largest value of each of MEASURED's columns, from its keys. */
static void bound_keys(Keys *measured) {
    for (size_t r = 0; r < measured->rows; r++) {
        uint64_t key = measured->keys[r];
        for (int i = measured->entry - 1; i >= 0; i--) {
            int64_t value = (int64_t)(key & ((UINT64_C(1) << measured->width[i]) - 1));
            if (value > measured->most[measured->order[i]]) measured->most[measured->order[i]] = value;
            key >>= measured->width[i];
        }
    }
}

/* KEYS given (btree.write_indexes) into MEASURED, as the measuring walk would gather them: 1; 0 where they are not
 * those the plan reads (the table's pages would be needed), -1 with a Python error set. */
static int given_keys(PyObject *keys_arg, const Table *table, const Keys *keys, int count, Keys *measured) {
    PyObject *positions_arg, *buffers_arg;
    int width;
    if (!PyArg_ParseTuple(keys_arg, "OiO;keys are (positions, width, buffers)", &positions_arg, &width, &buffers_arg))
        return -1;
    PyObject *positions = PySequence_Fast(positions_arg, "positions must be a sequence");
    PyObject *buffers = positions ? PySequence_Fast(buffers_arg, "buffers must be a sequence") : NULL;
    int ok = buffers != NULL;
    Py_ssize_t columns = ok ? PySequence_Fast_GET_SIZE(positions) : 0;
    ok = ok && columns == table->columns && width >= 1 && width <= 63 && width * columns <= 64 &&
         entries_hold_all(table, keys, count);
    unsigned seen = 0; /* the columns named so far: each once */
    for (Py_ssize_t i = 0; ok && i < columns; i++) {
        long position = PyLong_AsLong(PySequence_Fast_GET_ITEM(positions, i));
        int at = 0;
        while (at < table->columns && table->position[at] != position) at++;
        ok = at < table->columns && !(seen >> at & 1);
        seen |= 1u << at;
        measured->order[i] = at, measured->width[i] = width;
    }
    measured->columns = measured->entry = (int)columns;
    measured->gathering = 1;
    int result = PyErr_Occurred() ? -1 : ok;
    if (result == 1) result = copy_keys(buffers, measured);
    if (result == 1) bound_keys(measured);
    Py_XDECREF(positions);
    Py_XDECREF(buffers);
    return result;
}

/* A list of the first COLUMNS of COUNTS. */
static PyObject *count_list(const size_t *counts, int columns) {
    PyObject *list = PyList_New(columns);
    for (int p = 0; list && p < columns; p++) {
        PyObject *value = PyLong_FromSize_t(counts[p]);
        if (!value) Py_CLEAR(list);
        else PyList_SET_ITEM(list, p, value);
    }
    return list;
}

/* (ROOTS, [each index's prefix counts, ..., the table's or None]); ROOTS is taken; NULL with an error set. */
static PyObject *with_counts(PyObject *roots, const Keys *keys, int count, const Keys *table_keys,
                             size_t (*distinct)[MAX_COLUMNS]) {
    PyObject *all = PyList_New(count + 1);
    for (int k = 0; all && k <= count; k++) {
        PyObject *counts = k < count ? count_list(distinct[k], keys[k].entry)
                           : table_keys ? count_list(distinct[k], table_keys->entry)
                                        : Py_NewRef(Py_None);
        if (!counts) Py_CLEAR(all);
        else PyList_SET_ITEM(all, k, counts);
    }
    PyObject *result = all ? PyTuple_Pack(2, roots, all) : NULL;
    Py_DECREF(roots);
    Py_XDECREF(all);
    return result;
}

static PyObject *write_indexes(PyObject *self, PyObject *args) {
    (void)self;
    int fd, small_ints;
    Py_ssize_t page_size, usable;
    unsigned long root, first_page;
    int counting = 0;
    PyObject *entries_arg, *keys_arg = Py_None;
    if (!PyArg_ParseTuple(args, "innpkOk|Op", &fd, &page_size, &usable, &small_ints, &root, &entries_arg, &first_page,
                          &keys_arg, &counting))
        return NULL;
    PyObject *result = NULL, *entries = PySequence_Fast(entries_arg, "entries must be a sequence");
    size_t file_size = ((size_t)first_page - 1) * (size_t)page_size;
    Table table = {fd, NULL, file_size, (size_t)page_size, (size_t)usable, 0, 0, {0}};
    Keys keys[MAX_INDEXES] = {{0}}, measured = {0}, table_keys = {0};
    size_t distinct[MAX_INDEXES + 1][MAX_COLUMNS] = {{0}};
    int table_counted = 0;
    Pages pages = {(size_t)page_size, (size_t)usable, small_ints, 0, {0}, (uint32_t)first_page, fd, 0, NULL, 0, 0};
    uint32_t roots[MAX_INDEXES];
    uint64_t *spare = NULL, *sorted = NULL, *spare2 = NULL, *sorted2 = NULL;
    if (!entries) goto done;
    int count = (int)PySequence_Fast_GET_SIZE(entries);
    int fits = count >= 1 && count <= MAX_INDEXES && usable >= 480 && usable <= page_size && page_size <= 65536;
    if (fits) {
        fits = plan(entries, &table, keys, count);
        if (fits < 0) goto done;
    }
    int from_keys = keys_arg != Py_None;
    if (fits && from_keys) {
        fits = given_keys(keys_arg, &table, keys, count, &measured);
        if (fits < 0) goto done;
        fits = fits && widths(keys, count, &measured);
    }
    if (fits && !from_keys && !(table.page = malloc(WINDOW * (size_t)page_size))) {
        PyErr_NoMemory();
        goto done;
    }
    if (fits && !from_keys) {
        measured.columns = measured.entry = table.columns;
        measured.gathering = 1;
        int width = 64 / table.columns < 63 ? 64 / table.columns : 63; /* 16 bits for trend_data's 4 columns */
        for (int i = 0; i < table.columns; i++) measured.order[i] = i, measured.width[i] = width;
        Py_BEGIN_ALLOW_THREADS;
        fits = walk(&table, (uint32_t)root, measure, &measured) && widths(keys, count, &measured);
        Py_END_ALLOW_THREADS;
    }
    if (!fits) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    size_t rows = measured.rows;
    spare = malloc((rows + 1) * sizeof *spare);
    sorted = measured.gathering && measured.keys ? measured.keys : malloc((rows + 1) * sizeof *sorted);
    measured.keys = measured.gathering ? NULL : measured.keys;
    pages.batch = malloc(BATCH * (size_t)page_size);
    if (!spare || !sorted || !pages.batch) {
        PyErr_NoMemory();
        goto done;
    }
    if (count > 1) { /* without them, one index after the other on this thread */
        spare2 = malloc((rows + 1) * sizeof *spare2);
        sorted2 = spare2 ? malloc((rows + 1) * sizeof *sorted2) : NULL;
    }
    Indexes indexes = {&table, (uint32_t)root, keys, &measured, count, from_keys, rows,
                       {sorted, sorted2 ? sorted2 : sorted}, {spare, sorted2 ? spare2 : spare}, &pages, roots,
                       counting ? distinct : NULL};
    int ok;
    Py_BEGIN_ALLOW_THREADS;
    ok = write_all(&indexes);
    if (ok && counting) table_counted = count_table(&indexes, &table_keys);
    Py_END_ALLOW_THREADS;
    if (!ok) {
        if (pages.error) {
            errno = pages.error;
            PyErr_SetFromErrno(PyExc_OSError);
        } else if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    result = PyList_New(count);
    for (int k = 0; result && k < count; k++) PyList_SET_ITEM(result, k, PyLong_FromUnsignedLong(roots[k]));
    if (result && counting) result = with_counts(result, keys, count, table_counted ? &table_keys : NULL, distinct);
done:
    Py_XDECREF(entries);
    free(measured.keys);
    free(spare);
    free(sorted);
    free(spare2);
    free(sorted2);
    free(pages.batch);
    free(table.page);
    return result;
}

PyDoc_STRVAR(write_indexes_doc,
             "write_indexes(fd, page_size, usable, small_ints, root, entries, first_page, keys=None, count=False) -> "
             "[root, ...] | ([root, ...], [distinct, ...]) | None\n\n"
             "trend_data's indexes over ENTRIES written to FD (trendconv.loading.btree.write_indexes).");

static PyMethodDef methods[] = {
    {"write_indexes", write_indexes, METH_VARARGS, write_indexes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_btree", "trend_data's read indexes as SQLite b-tree pages.", -1, methods, NULL, NULL, NULL,
    NULL};

PyMODINIT_FUNC PyInit__btree(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module && PyModule_AddIntConstant(module, "MAX_ROWS", MAX_ROWS) < 0) Py_CLEAR(module);
    return module;
}

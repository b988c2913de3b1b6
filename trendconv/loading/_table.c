/* One rank's trend rows onto its leaf page of trend_data: the C twin of trendconv/loading/table.py's append_rows,
 * which says what is done and why. Both write the same pages, byte for byte; keep them in step.
 *
 *     append_rows(fd, spec, start, end, buf, next_page, page_size, usable, small_ints)
 *         -> (appended, stop, next_page, items)
 *
 * SPEC is the address of a column description as trendconv.loading.connection.column_spec packs it (as _columns.c
 * reads it): four int64 key columns, then the stat columns. BUF is the rank's buffer: its state (8 int64: cells,
 * top, pending, has_last, the last key) and then its page. Full pages are written to FD from page NEXT_PAGE on
 * (counted from 0). ITEMS are the pages written and the divider cells after them, in key order; STOP is END, or
 * the first row that does not fit the plan (a key not after the rank's last, or a record too large for a cell).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPEC_MAGIC 0x736E6D756C6F6374LL /* trendconv.loading.connection._SPEC_MAGIC */
#define MAX_COLUMNS 32                  /* connection.COLUMNS_MAX */
#define KEYS 4
#define STATE_BYTES 64
#define LEAF 0x0A
#define LEAF_HEADER 8
#define VALUE_LIMIT 1e9 /* trendconv.loading.insert.VALUE_LIMIT */
#define INF_VALUE (VALUE_LIMIT + 1)
#define MAX_CELL (2 + 1 + MAX_COLUMNS * 9)

enum { INT64 = 0, FLOAT64 = 1, CLEANED = 2 };
enum { CELLS, TOP, PENDING, HAS_LAST, LAST }; /* a rank's state, int64 each; LAST is the first of four */

typedef struct {
    int64_t type, data, validity, offset;
} Column;

typedef struct {
    int64_t magic, rows, columns;
    Column column[MAX_COLUMNS];
} Spec;

/* What the rows gave the caller: pages written (LENGTH 0, OFFSET the page) and dividers (cells in BYTES). */
typedef struct {
    size_t offset, length;
} Item;

typedef struct {
    int fd;
    size_t page_size, usable;
    int small_ints;
    int64_t next_page;
    Item *items;
    size_t count, room;
    uint8_t *bytes;
    size_t used, space;
    int error; /* errno of a failed write, or ENOMEM */
} Out;

static int is_null(const Column *c, int64_t row) {
    if (!c->data) return 1;
    if (!c->validity) return 0;
    int64_t at = c->offset + row;
    const uint8_t *bits = (const uint8_t *)(intptr_t)c->validity;
    return !(bits[at >> 3] >> (at & 7) & 1);
}

static int64_t int_at(const Column *c, int64_t row) { return ((const int64_t *)(intptr_t)c->data)[c->offset + row]; }
static double float_at(const Column *c, int64_t row) { return ((const double *)(intptr_t)c->data)[c->offset + row]; }

/* trendconv.loading.insert.clean_values on one value; NaN stays NaN, which is stored as NULL. */
static double cleaned(double value) {
    if (isnan(value)) return value;
    if (isinf(value)) return value > 0 ? INF_VALUE : -INF_VALUE;
    return value > VALUE_LIMIT ? VALUE_LIMIT : value < -VALUE_LIMIT ? -VALUE_LIMIT : value;
}

static int int_serial(int64_t value, int small_ints, int *size) {
    if (small_ints && (value == 0 || value == 1)) {
        *size = 0;
        return 8 + (int)value;
    }
    uint64_t magnitude = value < 0 ? ~(uint64_t)value : (uint64_t)value;
    static const uint64_t limits[] = {0x7F, 0x7FFF, 0x7FFFFF, 0x7FFFFFFF, 0x7FFFFFFFFFFFULL};
    static const int sizes[] = {1, 2, 3, 4, 6};
    for (int i = 0; i < 5; i++)
        if (magnitude <= limits[i]) {
            *size = sizes[i];
            return i + 1;
        }
    *size = 8;
    return 6;
}

static uint8_t *put_big(uint8_t *at, uint64_t value, int size) {
    for (int i = size - 1; i >= 0; i--, value >>= 8) at[i] = (uint8_t)value;
    return at + size;
}

static size_t put_varint(uint8_t *at, uint64_t value) {
    uint8_t bytes[10]; /* seven bits a byte, the last first; every byte but the last has its high bit set */
    size_t count = 0;
    bytes[count++] = (uint8_t)(value & 0x7F);
    while ((value >>= 7) && count < 9) bytes[count++] = (uint8_t)(0x80 | (value & 0x7F));
    for (size_t i = 0; i < count; i++) at[i] = bytes[count - 1 - i];
    return count;
}

/* The row's cell (payload size, then the record SQLite writes for it) into CELL; its length. */
static size_t make_cell(const Spec *spec, int64_t row, int small_ints, uint8_t *cell) {
    uint8_t serials[MAX_COLUMNS], body[MAX_COLUMNS * 8], *end = body;
    int columns = (int)spec->columns;
    for (int i = 0; i < columns; i++) {
        const Column *c = &spec->column[i];
        if (is_null(c, row)) {
            serials[i] = 0;
        } else if (c->type == INT64) {
            int size;
            int64_t value = int_at(c, row);
            serials[i] = (uint8_t)int_serial(value, small_ints, &size);
            end = put_big(end, (uint64_t)value, size);
        } else {
            double value = float_at(c, row);
            value = c->type == CLEANED ? cleaned(value) : value;
            if (isnan(value)) {
                serials[i] = 0;
                continue;
            }
            if (value == 0) value = 0.0; /* SQLite stores -0.0 as +0.0 */
            uint64_t bits;
            memcpy(&bits, &value, sizeof bits);
            serials[i] = 7;
            end = put_big(end, bits, 8);
        }
    }
    size_t record = 1 + (size_t)columns + (size_t)(end - body); /* fewer than 127 columns: a one-byte header size */
    size_t at = put_varint(cell, record);
    cell[at++] = (uint8_t)(1 + columns);
    memcpy(cell + at, serials, (size_t)columns);
    memcpy(cell + at + columns, body, (size_t)(end - body));
    return at + (size_t)columns + (size_t)(end - body);
}

static int add_item(Out *out, size_t offset, size_t length) {
    if (out->count == out->room) {
        size_t room = out->room ? 2 * out->room : 16;
        Item *items = realloc(out->items, room * sizeof *items);
        if (!items) return 0;
        out->items = items, out->room = room;
    }
    out->items[out->count++] = (Item){offset, length};
    return 1;
}

static int add_divider(Out *out, const uint8_t *cell, size_t length) {
    if (out->used + length > out->space) {
        size_t space = out->space ? 2 * out->space : 4096;
        while (space < out->used + length) space *= 2;
        uint8_t *bytes = realloc(out->bytes, space);
        if (!bytes) return 0;
        out->bytes = bytes, out->space = space;
    }
    memcpy(out->bytes + out->used, cell, length);
    out->used += length;
    return add_item(out, out->used - length, length);
}

/* The rank's page finished and written as page NEXT_PAGE; a new one started. A signal (Ctrl-C) during the write
 * is handled by Python when the call returns: the write goes on. */
static int write_page(Out *out, int64_t *state, uint8_t *page) {
    page[0] = LEAF, page[1] = page[2] = 0;
    page[3] = (uint8_t)(state[CELLS] >> 8), page[4] = (uint8_t)state[CELLS];
    unsigned top = (unsigned)(state[TOP] % 65536);
    page[5] = (uint8_t)(top >> 8), page[6] = (uint8_t)top, page[7] = 0;
    size_t left = out->page_size;
    off_t offset = (off_t)out->next_page * (off_t)out->page_size;
    const uint8_t *at = page;
    while (left) {
        ssize_t done = pwrite(out->fd, at, left, offset);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) {
            out->error = done < 0 ? errno : ENOSPC;
            return 0;
        }
        at += done, offset += done, left -= (size_t)done;
    }
    if (!add_item(out, (size_t)out->next_page, 0)) return 0;
    out->next_page++;
    memset(page, 0, out->page_size);
    state[CELLS] = 0, state[TOP] = (int64_t)out->usable;
    return 1;
}

/* The loop over rows START to END; the row it stopped at (END, or the first that does not fit the plan), or -1
 * after a failed write or allocation (OUT's error). */
static int64_t append(const Spec *spec, int64_t start, int64_t end, uint8_t *buf, Out *out, int64_t *appended) {
    int64_t state[8];
    memcpy(state, buf, sizeof state);
    uint8_t *page = buf + STATE_BYTES, cell[MAX_CELL];
    size_t most = (out->usable - 12) * 64 / 255 - 23; /* btree.max_local */
    int64_t row = start;
    for (; row < end; row++) {
        int64_t key[KEYS];
        int null_key = 0;
        for (int i = 0; i < KEYS; i++) {
            null_key |= is_null(&spec->column[i], row);
            key[i] = null_key ? 0 : int_at(&spec->column[i], row);
        }
        if (null_key) break; /* SQLite refuses it (NOT NULL), with its own message */
        if (state[HAS_LAST]) {
            int order = 0;
            for (int i = 0; i < KEYS && !order; i++) order = key[i] < state[LAST + i] ? -1 : key[i] > state[LAST + i];
            if (order == 0) continue; /* INSERT OR IGNORE keeps the first of a key */
            if (order < 0) break;
        }
        size_t length = make_cell(spec, row, out->small_ints, cell);
        size_t payload_bytes = length - (cell[0] < 0x80 ? 1 : 2);
        if (payload_bytes > most) break;
        if (!state[PENDING] && LEAF_HEADER + 2 * (size_t)(state[CELLS] + 1) + length > (size_t)state[TOP]) {
            if (!write_page(out, state, page)) return -1;
            state[PENDING] = 1;
        }
        if (state[PENDING]) {
            if (!add_divider(out, cell, length)) return -1;
            state[PENDING] = 0;
        } else {
            size_t top = (size_t)state[TOP] - length, pointer = LEAF_HEADER + 2 * (size_t)state[CELLS];
            memcpy(page + top, cell, length);
            page[pointer] = (uint8_t)(top >> 8), page[pointer + 1] = (uint8_t)top;
            state[CELLS]++, state[TOP] = (int64_t)top;
        }
        state[HAS_LAST] = 1;
        memcpy(&state[LAST], key, sizeof key);
        ++*appended;
    }
    memcpy(buf, state, sizeof state);
    return row;
}

static PyObject *items_list(const Out *out) {
    PyObject *items = PyList_New((Py_ssize_t)out->count);
    for (size_t i = 0; items && i < out->count; i++) {
        const Item *item = &out->items[i];
        PyObject *value = item->length
                              ? PyBytes_FromStringAndSize((const char *)out->bytes + item->offset, (Py_ssize_t)item->length)
                              : PyLong_FromSize_t(item->offset);
        if (!value) Py_CLEAR(items);
        else PyList_SET_ITEM(items, (Py_ssize_t)i, value);
    }
    return items;
}

static PyObject *append_rows(PyObject *self, PyObject *args) {
    (void)self;
    int fd, small_ints;
    long long spec_address, start, end, next_page;
    Py_ssize_t page_size, usable;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "iLLLw*Lnnp", &fd, &spec_address, &start, &end, &buf, &next_page, &page_size, &usable,
                          &small_ints))
        return NULL;
    const Spec *spec = (const Spec *)(intptr_t)spec_address;
    PyObject *result = NULL;
    if (!spec || spec->magic != SPEC_MAGIC || spec->columns < KEYS || spec->columns > MAX_COLUMNS || start < 0 ||
        end > spec->rows || start > end || usable < 480 || usable > page_size || page_size > 65536 ||
        buf.len != STATE_BYTES + page_size) {
        PyErr_SetString(PyExc_ValueError, "append_rows: arguments that do not describe rows and a rank page");
        PyBuffer_Release(&buf);
        return NULL;
    }
    for (int i = 0; i < KEYS; i++)
        if (spec->column[i].type != INT64) {
            PyErr_SetString(PyExc_TypeError, "append_rows: the key columns must be int64");
            PyBuffer_Release(&buf);
            return NULL;
        }
    Out out = {fd, (size_t)page_size, (size_t)usable, small_ints, next_page, NULL, 0, 0, NULL, 0, 0, 0};
    int64_t appended = 0, stop;
    Py_BEGIN_ALLOW_THREADS;
    stop = append(spec, start, end, (uint8_t *)buf.buf, &out, &appended);
    Py_END_ALLOW_THREADS;
    if (stop < 0) {
        errno = out.error ? out.error : ENOMEM;
        if (errno == ENOMEM) PyErr_NoMemory();
        else PyErr_SetFromErrno(PyExc_OSError);
    } else {
        PyObject *items = items_list(&out);
        if (items) result = Py_BuildValue("LLLN", (long long)appended, (long long)stop, (long long)out.next_page, items);
    }
    free(out.items);
    free(out.bytes);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(append_rows_doc,
             "append_rows(fd, spec, start, end, buf, next_page, page_size, usable, small_ints)\n"
             "    -> (appended, stop, next_page, items)\n\n"
             "One rank's rows onto its page (trendconv.loading.table.append_rows).");

static PyMethodDef methods[] = {
    {"append_rows", append_rows, METH_VARARGS, append_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_table", "trend_data's rows as SQLite b-tree pages.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__table(void) { return PyModule_Create(&module_def); }

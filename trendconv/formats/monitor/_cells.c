/* The rows of a regular monitor CSV file in one pass (docs/monitor-format.md §3.3).
 *
 * A regular file is what the monitor writes: every line has the header's number of fields, lines end with \n or
 * \r\n, the name, vpp_stage, step, micro_step and stat cells are not quoted, every key cell is a plain integer
 * (-?[0-9]{1,18}), every stat cell a plain decimal number, `nan`, `inf`, `-inf` or empty (NA), and no name is an NA
 * spelling. For such a file
 * the cell rules of trendconv.formats.monitor.rules come down to these conversions, done here without a CSV reader's
 * set-up per file; anything else returns None and the file takes the general path (pyarrow's reader and the rules),
 * which gives the same values for every regular file (tests/test_monitor_cells.py compares the two).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { IGNORED = 0, NAME = 1, INTEGER = 2, NUMBER = 3 };
#define MAX_NUMBER 63 /* longer number cells take the general path */

typedef struct {
    int role;
    int slot; /* the column's place among the INTEGER or the NUMBER columns */
} Column;

typedef struct {
    Py_ssize_t rows;
    int32_t *offsets;
    char *names;
    Py_ssize_t names_size;
    int64_t **integers;
    double **numbers;
} Out;

static int plain_integer(const char *cell, Py_ssize_t size, int64_t *value) {
    Py_ssize_t at = 0;
    int negative = size > 0 && cell[0] == '-';
    at += negative;
    if (size - at < 1 || size - at > 18) return 0; /* 18 digits always fit an int64 */
    int64_t result = 0;
    for (; at < size; at++) {
        if (cell[at] < '0' || cell[at] > '9') return 0;
        result = result * 10 + (cell[at] - '0');
    }
    *value = negative ? -result : result;
    return 1;
}

static Py_ssize_t digits(const char *cell, Py_ssize_t at, Py_ssize_t size) {
    Py_ssize_t start = at;
    while (at < size && cell[at] >= '0' && cell[at] <= '9') at++;
    return at - start;
}

/* -?(D+(.D*)?|.D+)([eE][+-]?D+)? : a subset of what both pandas and Arrow read as a float. */
static int decimal_syntax(const char *cell, Py_ssize_t size) {
    Py_ssize_t at = cell[0] == '-';
    Py_ssize_t whole = digits(cell, at, size);
    at += whole;
    Py_ssize_t fraction = 0;
    if (at < size && cell[at] == '.') {
        fraction = digits(cell, at + 1, size);
        at += 1 + fraction;
    }
    if (whole + fraction == 0) return 0;
    if (at < size && (cell[at] == 'e' || cell[at] == 'E')) {
        at++;
        if (at < size && (cell[at] == '+' || cell[at] == '-')) at++;
        Py_ssize_t exponent = digits(cell, at, size);
        if (exponent == 0) return 0;
        at += exponent;
    }
    return at == size;
}

static int plain_number(const char *cell, Py_ssize_t size, double *value) {
    if (size == 0 || (size == 3 && memcmp(cell, "nan", 3) == 0)) {
        *value = NAN;
        return 1;
    }
    if (size == 3 && memcmp(cell, "inf", 3) == 0) {
        *value = INFINITY;
        return 1;
    }
    if (size == 4 && memcmp(cell, "-inf", 4) == 0) {
        *value = -INFINITY;
        return 1;
    }
    if (size > MAX_NUMBER || !decimal_syntax(cell, size)) return 0;
    char text[MAX_NUMBER + 1];
    memcpy(text, cell, size);
    text[size] = '\0';
    errno = 0;
    *value = strtod(text, NULL); /* correctly rounded, as Arrow's parser */
    return errno == 0;           /* over- or underflow: the general path decides */
}

/* pandas' default NA spellings (trendconv.formats.monitor.rules.NA_TOKENS, which a test compares), the empty
 * cell aside: a name column holding one is not read as it is written. */
static const char *const NA_NAMES[] = {"#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                                       "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN",
                                       "None", "n/a", "nan", "null", NULL};

static int na_name(const char *cell, Py_ssize_t size) {
    if (size == 0) return 1;
    if (size > 8) return 0;
    for (const char *const *token = NA_NAMES; *token; token++)
        if ((Py_ssize_t)strlen(*token) == size && memcmp(*token, cell, size) == 0) return 1;
    return 0;
}

static int store(const Column *column, const char *cell, Py_ssize_t size, Py_ssize_t row, Out *out) {
    switch (column->role) {
    case NAME:
        if (na_name(cell, size)) return 0;
        memcpy(out->names + out->names_size, cell, size);
        out->names_size += size;
        out->offsets[row + 1] = (int32_t)out->names_size;
        return 1;
    case INTEGER:
        return plain_integer(cell, size, &out->integers[column->slot][row]);
    case NUMBER:
        return plain_number(cell, size, &out->numbers[column->slot][row]);
    default:
        return 1;
    }
}

/* One field starting at *at: its end, with *at moved past its separator. 0 when it is not regular. */
static int field(const char *raw, Py_ssize_t size, Py_ssize_t *at, const char **cell, Py_ssize_t *length,
                 int *quoted, int *last) {
    Py_ssize_t start = *at, end;
    *quoted = start < size && raw[start] == '"';
    if (*quoted) {
        end = start + 1;
        for (;;) { /* a doubled quote is a quote; the cell is never used, only skipped */
            const char *quote = memchr(raw + end, '"', size - end);
            if (!quote) return 0;
            end = quote - raw + 1;
            if (end < size && raw[end] == '"') end++;
            else break;
        }
    } else {
        end = start;
        while (end < size && raw[end] != ',' && raw[end] != '\n' && raw[end] != '\r') {
            if (raw[end] == '"') return 0; /* a quote inside a field: the general path */
            end++;
        }
    }
    *cell = raw + start;
    *length = end - start;
    if (end >= size || raw[end] == '\n') {
        *last = 1;
        *at = end + 1;
    } else if (raw[end] == '\r') {
        if (end + 1 >= size || raw[end + 1] != '\n') return 0; /* a bare \r ends a line for pandas: general path */
        *last = 1;
        *at = end + 2;
    } else if (raw[end] == ',') {
        *last = 0;
        *at = end + 1;
    } else {
        return 0; /* text after a closing quote */
    }
    return 1;
}

static int line(const char *raw, Py_ssize_t size, Py_ssize_t *at, const Column *columns, Py_ssize_t width,
                Out *out) {
    Py_ssize_t row = out->rows;
    out->offsets[row + 1] = (int32_t)out->names_size;
    for (Py_ssize_t index = 0; index < width; index++) {
        const char *cell;
        Py_ssize_t length;
        int quoted, last;
        if (!field(raw, size, at, &cell, &length, &quoted, &last)) return 0;
        if (last != (index == width - 1)) return 0; /* too few or too many fields */
        if (columns[index].role != IGNORED && quoted) return 0;
        if (!store(&columns[index], cell, length, row, out)) return 0;
    }
    out->rows++;
    return 1;
}

static int read_lines(const char *raw, Py_ssize_t size, Py_ssize_t at, const Column *columns, Py_ssize_t width,
                      Out *out) {
    while (at < size) {
        if (raw[at] == '\n') { /* an empty line: neither reader makes a row of it */
            at++;
            continue;
        }
        if (raw[at] == '\r') return 0;
        if (!line(raw, size, &at, columns, width, out)) return 0;
    }
    return 1;
}

static PyObject *bytes_of(const void *data, Py_ssize_t size) {
    return PyBytes_FromStringAndSize((const char *)data, size);
}

static PyObject *result(Out *out, Py_ssize_t integers, Py_ssize_t numbers) {
    PyObject *ints = PyList_New(integers), *floats = PyList_New(numbers);
    if (!ints || !floats) goto fail;
    for (Py_ssize_t slot = 0; slot < integers; slot++) {
        PyObject *column = bytes_of(out->integers[slot], out->rows * (Py_ssize_t)sizeof(int64_t));
        if (!column) goto fail;
        PyList_SET_ITEM(ints, slot, column);
    }
    for (Py_ssize_t slot = 0; slot < numbers; slot++) {
        PyObject *column = bytes_of(out->numbers[slot], out->rows * (Py_ssize_t)sizeof(double));
        if (!column) goto fail;
        PyList_SET_ITEM(floats, slot, column);
    }
    return Py_BuildValue("nNNNN", out->rows, bytes_of(out->offsets, (out->rows + 1) * (Py_ssize_t)sizeof(int32_t)),
                         bytes_of(out->names, out->names_size), ints, floats);
fail:
    Py_XDECREF(ints);
    Py_XDECREF(floats);
    return NULL;
}

static void release(Out *out, Py_ssize_t integers, Py_ssize_t numbers) {
    free(out->offsets);
    free(out->names);
    for (Py_ssize_t slot = 0; out->integers && slot < integers; slot++) free(out->integers[slot]);
    for (Py_ssize_t slot = 0; out->numbers && slot < numbers; slot++) free(out->numbers[slot]);
    free(out->integers);
    free(out->numbers);
}

static int allocate(Out *out, Py_ssize_t rows, Py_ssize_t text, Py_ssize_t integers, Py_ssize_t numbers) {
    memset(out, 0, sizeof(*out));
    out->offsets = calloc(rows + 1, sizeof(int32_t));
    out->names = malloc(text + 1);
    out->integers = calloc(integers + 1, sizeof(int64_t *));
    out->numbers = calloc(numbers + 1, sizeof(double *));
    if (!out->offsets || !out->names || !out->integers || !out->numbers) return 0;
    for (Py_ssize_t slot = 0; slot < integers; slot++)
        if (!(out->integers[slot] = malloc((rows + 1) * sizeof(int64_t)))) return 0;
    for (Py_ssize_t slot = 0; slot < numbers; slot++)
        if (!(out->numbers[slot] = malloc((rows + 1) * sizeof(double)))) return 0;
    return 1;
}

static Py_ssize_t line_bound(const char *raw, Py_ssize_t size) {
    Py_ssize_t lines = 1;
    for (const char *at = raw; (at = memchr(at, '\n', raw + size - at)); at++) lines++;
    return lines;
}

static int roles(PyObject *indexes, int role, Column *columns, Py_ssize_t width) {
    Py_ssize_t count = PyTuple_GET_SIZE(indexes);
    for (Py_ssize_t slot = 0; slot < count; slot++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(indexes, slot));
        if (index < 0 || index >= width || columns[index].role != IGNORED) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "column index out of range or repeated");
            return 0;
        }
        columns[index].role = role;
        columns[index].slot = (int)slot;
    }
    return 1;
}

PyDoc_STRVAR(rows_doc,
             "rows(raw, start, width, name, integers, numbers) -> (rows, offsets, names, [int64 columns], "
             "[float64 columns]) or None\n\n"
             "The cells of a regular monitor CSV file from byte START on (after the header line), as raw buffers: "
             "int32 offsets and UTF-8 bytes of the NAME column, int64 cells of the INTEGERS columns and float64 "
             "cells of the NUMBERS columns (tuples of column indexes, WIDTH columns in all). None when the file is "
             "not regular.");

static PyObject *rows(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer raw;
    Py_ssize_t start, width, name;
    PyObject *integers, *numbers;
    if (!PyArg_ParseTuple(args, "y*nnnO!O!", &raw, &start, &width, &name, &PyTuple_Type, &integers, &PyTuple_Type,
                          &numbers))
        return NULL;
    PyObject *found = NULL;
    Column *columns = calloc(width > 0 ? width : 1, sizeof(Column));
    Py_ssize_t ints = PyTuple_GET_SIZE(integers), floats = PyTuple_GET_SIZE(numbers);
    Out out;
    memset(&out, 0, sizeof(out));
    if (!columns) {
        PyErr_NoMemory();
        goto done;
    }
    if (width < 1 || name < 0 || name >= width || start < 0 || start > raw.len) {
        PyErr_SetString(PyExc_ValueError, "width, name or start out of range");
        goto done;
    }
    columns[name].role = NAME;
    if (!roles(integers, INTEGER, columns, width) || !roles(numbers, NUMBER, columns, width)) goto done;
    const char *text = (const char *)raw.buf;
    if (!allocate(&out, line_bound(text, raw.len), raw.len, ints, floats)) {
        PyErr_NoMemory();
        goto done;
    }
    if (raw.len < INT32_MAX && read_lines(text, raw.len, start, columns, width, &out)) {
        found = result(&out, ints, floats); /* name offsets are int32 (Arrow's string type) */
    } else {
        found = Py_None;
        Py_INCREF(found);
    }
done:
    release(&out, ints, floats);
    free(columns);
    PyBuffer_Release(&raw);
    return found;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cells", "The cells of regular monitor CSV files in one pass.", -1, methods, NULL, NULL,
    NULL, NULL};

PyMODINIT_FUNC PyInit__cells(void) { return PyModule_Create(&module_def); }

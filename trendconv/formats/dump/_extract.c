/* trendconv.formats.dump._extract: the rows of one dump.json, read in one pass in C.
 *
 * It does what trendconv.formats.dump.parse does with msgspec and Python loops (docs/dump-format.md §5-§7: tensor
 * slots, eligibility, skip reasons, statistics), for the files it can read exactly: ASCII JSON whose
 * keys, field and parameter names, tensor types, dtypes and string statistics hold no escapes, with no
 * repeated key in `data` or in a parameter object, and entry fields in msprobe's order. Anything else
 * raises Refused, and the caller parses the file the Python way, which also words the errors. The rules
 * that can change stay in Python: a callback gives each key's (names, metrics, micro steps; the caller
 * caches them across files), and the eligible tensor types and dtypes are passed in.
 *
 * The rows come back as Arrow-ready buffers (row -> key position as int32, target names as int32
 * offsets and UTF-8 bytes, four float64 statistic columns with validity bitmaps), the per-key values as
 * lists, the skip counts as a dict.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 900 /* deeper than this, Python's json would hit its recursion limit: leave it to Python */
#define STATS 4

static PyObject *Refused;
static double nan_value, inf_value;

/* ---------------------------------------------------------------- growable buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len); }

/* ---------------------------------------------------------------- the reader's state */

enum { SKIP_NOT_OBJECT, SKIP_NULL, SKIP_NESTED, SKIP_NON_TENSOR, SKIP_TYPE, SKIP_DTYPE, SKIP_CODES };

#define MAX_WORDS 16

/* A few strings given by the caller (the rules' tensor types or float dtypes), as UTF-8. */
typedef struct {
    int count;
    const char *text[MAX_WORDS];
    Py_ssize_t len[MAX_WORDS];
} Words;

typedef struct {
    const char *start, *end;
    /* refusal: a reason and where, for tests and debugging; a Python error is raised instead when set */
    const char *why;
    const char *where;
    int depth;
    /* inputs */
    PyObject *key_cache, *key_info, *raw_stat;
    Words tensor_types, float_dtypes;
    /* outputs */
    PyObject *keys, *metrics, *indexes, *locals, *seen, *skipped;
    Py_ssize_t skip_counts[SKIP_CODES];
    Buf row_key, name_offsets, names;
    Buf values[STATS], validity[STATS];
    int64_t rows, nulls[STATS];
} Reader;

typedef enum { V_OBJECT, V_ARRAY, V_STRING, V_NUMBER, V_TRUE, V_FALSE, V_NULL, V_NAN, V_INF, V_NINF } Kind;

typedef struct {
    const char *start, *end; /* the value's bytes; a string's without its quotes */
    Kind kind;
    int escaped;  /* a string holding a backslash escape */
    int integer;  /* a number without fraction or exponent */
    int present;
} Span;

static int refuse(Reader *r, const char *why, const char *at) {
    if (!r->why) {
        r->why = why;
        r->where = at;
    }
    return -1;
}

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Whether P, which may be the end, is on C: a value can be missing where the text is cut short. */
static inline int at(const Reader *r, const char *p, char c) { return p < r->end && *p == c; }

static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* The bytes a string holds as they are: printable ASCII but the quote and the backslash. */
static unsigned char PLAIN[256];

static void make_plain_table(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
}

/* A string starting at P (on its opening quote); the span holds its content. JSON as Python's json reads
 * it (strict): no control characters, only the standard escapes. Non-ASCII bytes are refused. */
static const char *read_string(Reader *r, const char *p, Span *s) {
    const char *end = r->end;
    s->kind = V_STRING;
    s->escaped = 0;
    s->start = ++p;
    for (;;) {
        while (p < end && PLAIN[(unsigned char)*p]) p++;
        if (p >= end) return refuse(r, "unterminated string", p), NULL;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c >= 0x80) return refuse(r, "non-ASCII byte", p), NULL;
        if (c < 0x20) return refuse(r, "control character in a string", p), NULL;
        /* a backslash */
        s->escaped = 1;
        if (p + 1 >= end) return refuse(r, "unterminated string", p), NULL;
        char e = p[1];
        if (e == 'u') {
            if (p + 6 > end || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5]))
                return refuse(r, "bad \\u escape", p), NULL;
            p += 6;
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            p += 2;
        } else {
            return refuse(r, "bad escape", p), NULL;
        }
    }
    s->end = p;
    return p + 1;
}

/* A number as Python's json reads it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? */
static const char *read_number(Reader *r, const char *p, Span *s) {
    const char *end = r->end;
    s->kind = V_NUMBER;
    s->start = p;
    s->integer = 1;
    if (p < end && *p == '-') p++;
    if (p >= end || !is_digit(*p)) return refuse(r, "bad number", p), NULL;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && *p == '.') {
        s->integer = 0;
        p++;
        if (p >= end || !is_digit(*p)) return refuse(r, "bad number", p), NULL;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        s->integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return refuse(r, "bad number", p), NULL;
        while (p < end && is_digit(*p)) p++;
    }
    s->end = p;
    return p;
}

static const char *read_literal(Reader *r, const char *p, const char *word, Kind kind, Span *s) {
    size_t n = strlen(word);
    if ((size_t)(r->end - p) < n || memcmp(p, word, n) != 0) return refuse(r, "bad literal", p), NULL;
    s->kind = kind;
    s->start = p;
    s->end = p + n;
    return p + n;
}

static const char *skip_value(Reader *r, const char *p, Span *s);

/* Calls MEMBER for each member of the object at P (on its '{'), with the key's span and P on the value
 * (whitespace skipped); MEMBER returns the position after the value. */
typedef const char *(*MemberFn)(Reader *r, const char *p, Span *key, void *context);

static const char *each_member(Reader *r, const char *p, MemberFn member, void *context) {
    const char *end = r->end;
    if (++r->depth > MAX_DEPTH) return refuse(r, "nested too deeply", p), NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        r->depth--;
        return p + 1;
    }
    for (;;) {
        Span key;
        if (p >= end || *p != '"') return refuse(r, "expected a key", p), NULL;
        p = read_string(r, p, &key);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return refuse(r, "expected ':'", p), NULL;
        p = skip_ws(p + 1, end);
        p = member(r, p, &key, context);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') break;
        return refuse(r, "expected ',' or '}'", p), NULL;
    }
    r->depth--;
    return p + 1;
}

/* Calls ITEM for each item of the array at P (on its '['), with P on the item; ITEM returns the position
 * after it. */
typedef const char *(*ItemFn)(Reader *r, const char *p, Py_ssize_t position, void *context);

static const char *each_item(Reader *r, const char *p, ItemFn item, void *context) {
    const char *end = r->end;
    if (++r->depth > MAX_DEPTH) return refuse(r, "nested too deeply", p), NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') {
        r->depth--;
        return p + 1;
    }
    for (Py_ssize_t position = 0;; position++) {
        p = item(r, p, position, context);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == ']') break;
        return refuse(r, "expected ',' or ']'", p), NULL;
    }
    r->depth--;
    return p + 1;
}

static const char *skip_member(Reader *r, const char *p, Span *key, void *context) {
    Span ignored;
    return skip_value(r, p, &ignored);
}

static const char *skip_item(Reader *r, const char *p, Py_ssize_t position, void *context) {
    Span ignored;
    return skip_value(r, p, &ignored);
}

/* Any value at P, checked and passed over; S says what it was and where. */
static const char *skip_value(Reader *r, const char *p, Span *s) {
    const char *end = r->end;
    s->present = 1;
    s->escaped = 0;
    s->integer = 0;
    if (p >= end) return refuse(r, "expected a value", p), NULL;
    switch (*p) {
        case '{':
            s->kind = V_OBJECT;
            s->start = p;
            p = each_member(r, p, skip_member, NULL);
            s->end = p;
            return p;
        case '[':
            s->kind = V_ARRAY;
            s->start = p;
            p = each_item(r, p, skip_item, NULL);
            s->end = p;
            return p;
        case '"':
            return read_string(r, p, s);
        case 't':
            return read_literal(r, p, "true", V_TRUE, s);
        case 'f':
            return read_literal(r, p, "false", V_FALSE, s);
        case 'n':
            return read_literal(r, p, "null", V_NULL, s);
        case 'N':
            return read_literal(r, p, "NaN", V_NAN, s);
        case 'I':
            return read_literal(r, p, "Infinity", V_INF, s);
        case '-':
            if (p + 1 < end && p[1] == 'I') return read_literal(r, p, "-Infinity", V_NINF, s);
            return read_number(r, p, s);
        default:
            if (is_digit(*p)) return read_number(r, p, s);
            return refuse(r, "expected a value", p), NULL;
    }
}

static inline int span_equals(const Span *s, const char *text, size_t n) {
    return (size_t)(s->end - s->start) == n && memcmp(s->start, text, n) == 0;
}

/* SPAN_IS(span, "literal"): the length is known when compiling */
#define SPAN_IS(s, literal) span_equals((s), (literal), sizeof(literal) - 1)

/* ------------------------------------------------- tensors and statistics (docs/dump-format.md §6-§7) */

typedef struct {
    Span type, dtype, stats[STATS];
} Tensor;

static int one_of(const Span *s, const Words *words) {
    for (int i = 0; i < words->count; i++)
        if (span_equals(s, words->text[i], (size_t)words->len[i])) return 1;
    return 0;
}

/* WORDS from a tuple of str; the tuple keeps the UTF-8 alive for the call. */
static int words_of(PyObject *tuple, Words *words, const char *name) {
    if (PyTuple_GET_SIZE(tuple) > MAX_WORDS) {
        PyErr_Format(PyExc_ValueError, "%s: at most %d", name, MAX_WORDS);
        return -1;
    }
    words->count = (int)PyTuple_GET_SIZE(tuple);
    for (int i = 0; i < words->count; i++) {
        words->text[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(tuple, i), &words->len[i]);
        if (!words->text[i]) return -1;
    }
    return 0;
}

/* Where a tensor field the rules read goes, or NULL for one they do not. */
static Span *tensor_slot(Tensor *t, const Span *key) {
    switch (key->end - key->start) {
        case 3:
            return SPAN_IS(key, "Max") ? &t->stats[1] : SPAN_IS(key, "Min") ? &t->stats[2] : NULL;
        case 4:
            return SPAN_IS(key, "type")   ? &t->type
                   : SPAN_IS(key, "Norm") ? &t->stats[0]
                   : SPAN_IS(key, "Mean") ? &t->stats[3]
                                          : NULL;
        case 5:
            return SPAN_IS(key, "dtype") ? &t->dtype : NULL;
        default:
            return NULL;
    }
}

static const char *tensor_member(Reader *r, const char *p, Span *key, void *context) {
    Tensor *t = context;
    /* an escaped field name may spell one the rules read */
    if (key->escaped) return refuse(r, "escaped field name in a tensor", key->start), NULL;
    Span *slot = tensor_slot(t, key);
    if (!slot) {
        Span ignored;
        return skip_value(r, p, &ignored);
    }
    return skip_value(r, p, slot); /* the last of duplicate fields wins, as in msgspec and Python dicts */
}

static const char *read_tensor(Reader *r, const char *p, Tensor *t) {
    memset(t, 0, sizeof *t);
    return each_member(r, p, tensor_member, t);
}

/* Why the tensor T gives no row (a SKIP_ code), or -1 when it is eligible; -2 refuses. */
static int tensor_skip(Reader *r, const Tensor *t) {
    if (!t->type.present || t->type.kind != V_STRING) return SKIP_NON_TENSOR;
    if (t->type.escaped) return refuse(r, "escaped tensor type", t->type.start), -2;
    if (!one_of(&t->type, &r->tensor_types)) {
        for (const char *c = t->type.start; c + 6 <= t->type.end; c++)
            if (memcmp(c, "Tensor", 6) == 0) return SKIP_TYPE;
        return SKIP_NON_TENSOR;
    }
    if (!t->dtype.present || t->dtype.kind != V_STRING) return SKIP_DTYPE;
    if (t->dtype.escaped) return refuse(r, "escaped dtype", t->dtype.start), -2;
    return one_of(&t->dtype, &r->float_dtypes) ? -1 : SKIP_DTYPE;
}

/* ---------------------------------------------------------------- numbers
 *
 * Python's float() (dtoa, plus an x87 control-word switch per call) takes about 240 ns a number, most of
 * the time the reader spends. The Eisel-Lemire algorithm gives the same correctly rounded double in about
 * 20 ns for a significand of up to 19 digits, or says it cannot be sure (near a halfway point, subnormal,
 * overflow, more digits), and then float()'s own routine decides. */

#define POW10_MIN (-348)
#define POW10_MAX 347
static uint64_t pow10_lo[POW10_MAX - POW10_MIN + 1], pow10_hi[POW10_MAX - POW10_MIN + 1];

/* 10^e as a 128-bit significand rounded down (the top bit set), from Python's exact integers. */
static int make_pow10_table(void) {
    int failed = -1;
    PyObject *ten = PyLong_FromLong(10), *one = PyLong_FromLong(1), *mask = PyLong_FromUnsignedLongLong(UINT64_MAX);
    PyObject *shift64 = PyLong_FromLong(64);
    if (!ten || !one || !mask || !shift64) goto done;
    for (int e = POW10_MIN; e <= POW10_MAX; e++) {
        PyObject *exponent = PyLong_FromLong(e < 0 ? -e : e);
        PyObject *power = exponent ? PyNumber_Power(ten, exponent, Py_None) : NULL;
        Py_XDECREF(exponent);
        if (!power) goto done;
        PyObject *bits = PyObject_CallMethod(power, "bit_length", NULL);
        long length = bits ? PyLong_AsLong(bits) : -1;
        Py_XDECREF(bits);
        PyObject *m = NULL;
        if (length >= 0) {
            if (e < 0) {
                PyObject *places = PyLong_FromLong(length + 127);
                PyObject *numerator = places ? PyNumber_Lshift(one, places) : NULL;
                m = numerator ? PyNumber_FloorDivide(numerator, power) : NULL;
                Py_XDECREF(places);
                Py_XDECREF(numerator);
            } else {
                PyObject *places = PyLong_FromLong(length > 128 ? length - 128 : 128 - length);
                if (places) m = length > 128 ? PyNumber_Rshift(power, places) : PyNumber_Lshift(power, places);
                Py_XDECREF(places);
            }
        }
        Py_DECREF(power);
        if (!m) goto done;
        PyObject *high = PyNumber_Rshift(m, shift64);
        pow10_lo[e - POW10_MIN] = PyLong_AsUnsignedLongLongMask(m);
        pow10_hi[e - POW10_MIN] = high ? PyLong_AsUnsignedLongLongMask(high) : 0;
        Py_DECREF(m);
        Py_XDECREF(high);
        if (!high || PyErr_Occurred()) goto done;
    }
    failed = 0;
done:
    Py_XDECREF(ten);
    Py_XDECREF(one);
    Py_XDECREF(mask);
    Py_XDECREF(shift64);
    return failed;
}

/* MAN × 10^EXP10 correctly rounded to a double, when that is certain (returns 1); 0 otherwise. */
static int eisel_lemire(uint64_t man, int64_t exp10, int negative, double *out) {
#ifndef __SIZEOF_INT128__
    return 0;
#else
    if (exp10 < POW10_MIN || exp10 > POW10_MAX) return 0;
    int clz = __builtin_clzll(man);
    man <<= clz;
    uint64_t exp2 = (uint64_t)(((217706 * exp10) >> 16) + 64 + 1023) - (uint64_t)clz;
    size_t i = (size_t)(exp10 - POW10_MIN);
    unsigned __int128 x = (unsigned __int128)man * pow10_hi[i];
    uint64_t x_hi = (uint64_t)(x >> 64), x_lo = (uint64_t)x;
    if ((x_hi & 0x1FF) == 0x1FF && x_lo + man < man) {
        /* the truncated table may be too low here: take in the next 64 bits of the power */
        unsigned __int128 y = (unsigned __int128)man * pow10_lo[i];
        uint64_t y_hi = (uint64_t)(y >> 64), y_lo = (uint64_t)y;
        uint64_t merged_hi = x_hi, merged_lo = x_lo + y_hi;
        if (merged_lo < x_lo) merged_hi++;
        if ((merged_hi & 0x1FF) == 0x1FF && merged_lo + 1 == 0 && y_lo + man < man) return 0;
        x_hi = merged_hi;
        x_lo = merged_lo;
    }
    uint64_t msb = x_hi >> 63;
    uint64_t mantissa = x_hi >> (msb + 9);
    exp2 -= 1 ^ msb;
    if (x_lo == 0 && (x_hi & 0x1FF) == 0 && (mantissa & 3) == 1) return 0; /* a halfway case */
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >> 53) {
        mantissa >>= 1;
        exp2++;
    }
    if (exp2 - 1 >= 0x7FF - 1) return 0; /* subnormal, infinite */
    uint64_t bits = exp2 << 52 | (mantissa & 0x000FFFFFFFFFFFFFull);
    if (negative) bits |= 0x8000000000000000ull;
    memcpy(out, &bits, sizeof bits);
    return 1;
#endif
}

/* The value of a valid JSON number token, the fast way; 0 when float() must decide. */
static int fast_number(const char *p, const char *end, double *out) {
    int negative = *p == '-';
    p += negative;
    uint64_t man = 0;
    int digits = 0;
    int64_t exp10 = 0;
    for (; p < end && is_digit(*p); p++) {
        if (man == 0 && *p == '0') continue;
        if (++digits > 19) return 0;
        man = man * 10 + (uint64_t)(*p - '0');
    }
    if (p < end && *p == '.') {
        for (p++; p < end && is_digit(*p); p++) {
            exp10--;
            if (man == 0 && *p == '0') continue;
            if (++digits > 19) return 0;
            man = man * 10 + (uint64_t)(*p - '0');
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int minus = *p == '-';
        p += *p == '-' || *p == '+';
        int64_t e = 0;
        for (; p < end && is_digit(*p); p++) {
            if (e > 100000) return 0;
            e = e * 10 + (*p - '0');
        }
        exp10 += minus ? -e : e;
    }
    if (man == 0) {
        *out = negative ? -0.0 : 0.0;
        return 1;
    }
#if FLT_EVAL_METHOD == 0
    /* Clinger's exact case, which Eisel-Lemire cannot always tell from a halfway point (8808.5, bf16 values):
     * both operands are exact doubles, so one correctly rounded multiplication or division is the answer */
    static const double exact_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                         1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (man <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        double value = (double)man;
        value = exp10 < 0 ? value / exact_pow10[-exp10] : value * exact_pow10[exp10];
        *out = negative ? -value : value;
        return 1;
    }
#endif
    return eisel_lemire(man, exp10, negative, out);
}

/* A number's value as Python gives it: float() of a float token; float(int) of an integer token, which is
 * +0.0 for -0 and ±DBL_MAX beyond float range (as rules.raw_stat clamps an int that float() refuses). */
static int number_value(const Span *s, double *out) {
    double value;
    if (!fast_number(s->start, s->end, &value)) {
        char small[64];
        size_t n = (size_t)(s->end - s->start);
        char *text = n < sizeof small ? small : PyMem_Malloc(n + 1);
        if (!text) return PyErr_NoMemory(), -1;
        memcpy(text, s->start, n);
        text[n] = '\0';
        char *stop;
        value = PyOS_string_to_double(text, &stop, NULL);
        int failed = value == -1.0 && PyErr_Occurred();
        if (text != small) PyMem_Free(text);
        if (failed) return -1;
    }
    if (s->integer) {
        if (value == 0.0) value = 0.0;
        if (Py_IS_INFINITY(value)) value = value > 0 ? DBL_MAX : -DBL_MAX;
    }
    *out = value;
    return 0;
}

/* A statistic's float64 value (docs/dump-format.md §7 steps 1-2); *NULL_OUT is set when it has none. */
static int stat_value(Reader *r, const Span *s, double *out, int *null_out) {
    *null_out = 0;
    if (!s->present) {
        *null_out = 1;
        return 0;
    }
    switch (s->kind) {
        case V_NUMBER:
            return number_value(s, out);
        case V_TRUE:
            *out = 1.0;
            return 0;
        case V_FALSE:
            *out = 0.0;
            return 0;
        case V_NAN:
            *out = nan_value;
            return 0;
        case V_INF:
            *out = inf_value;
            return 0;
        case V_NINF:
            *out = -inf_value;
            return 0;
        case V_STRING: {
            if (s->escaped) return refuse(r, "escaped statistic", s->start);
            PyObject *text = PyUnicode_FromStringAndSize(s->start, s->end - s->start);
            if (!text) return -1;
            PyObject *value = PyObject_CallOneArg(r->raw_stat, text);
            Py_DECREF(text);
            if (!value) return -1;
            if (value == Py_None) {
                *null_out = 1;
            } else {
                *out = PyFloat_AsDouble(value);
                if (*out == -1.0 && PyErr_Occurred()) {
                    Py_DECREF(value);
                    return -1;
                }
            }
            Py_DECREF(value);
            return 0;
        }
        default: /* null, an object or a list: no number */
            *null_out = 1;
            return 0;
    }
}

static int put_stats(Reader *r, const Tensor *t) {
    int64_t row = r->rows;
    for (int i = 0; i < STATS; i++) {
        double value = 0.0;
        int null;
        if (stat_value(r, &t->stats[i], &value, &null) < 0) return -1;
        if (buf_put(&r->values[i], &value, sizeof value) < 0) return -1;
        if (row % 8 == 0) {
            unsigned char zero = 0;
            if (buf_put(&r->validity[i], &zero, 1) < 0) return -1;
        }
        if (null)
            r->nulls[i]++;
        else
            ((unsigned char *)r->validity[i].data)[row / 8] |= (unsigned char)(1u << (row % 8));
    }
    return 0;
}

/* ---------------------------------------------------------------- rows of one key */

typedef struct {
    int32_t position;      /* of the key in the key lists */
    const char *prefix;    /* the target prefix, UTF-8 */
    Py_ssize_t prefix_len;
    const char *start;     /* ".input.", ".output.", ".parameters." or "." */
    size_t start_len;
} Group;

static const char *const GROUP_STARTS[] = {".input.", ".output.", ".parameters."};

static void set_start(Group *g, const char *start) {
    g->start = start;
    g->start_len = strlen(start);
}

static int put_row(Reader *r, const Group *g, const char *suffix, size_t suffix_len, const Tensor *t) {
    int32_t offset;
    size_t start_len = g->start_len;
    if (r->names.len + (size_t)g->prefix_len + start_len + suffix_len > INT32_MAX)
        return refuse(r, "target names beyond 2 GiB", NULL);
    if (buf_put(&r->row_key, &g->position, sizeof g->position) < 0) return -1;
    if (buf_put(&r->names, g->prefix, (size_t)g->prefix_len) < 0) return -1;
    if (buf_put(&r->names, g->start, start_len) < 0) return -1;
    if (buf_put(&r->names, suffix, suffix_len) < 0) return -1;
    offset = (int32_t)r->names.len;
    if (buf_put(&r->name_offsets, &offset, sizeof offset) < 0) return -1;
    if (put_stats(r, t) < 0) return -1;
    r->rows++;
    return 0;
}

/* One slot of a list field: a row for an eligible tensor, else a skip count (docs/dump-format.md §6). */
static const char *slot_item(Reader *r, const char *p, Py_ssize_t position, void *context) {
    const Group *g = context;
    Span s;
    if (at(r, p, '{')) {
        Tensor t;
        p = read_tensor(r, p, &t);
        if (!p) return NULL;
        int skip = tensor_skip(r, &t);
        if (skip == -2) return NULL;
        if (skip >= 0) {
            r->skip_counts[skip]++;
            return p;
        }
        char digits[24];
        char *first = digits + sizeof digits;
        size_t value = (size_t)position;
        do *--first = (char)('0' + value % 10);
        while (value /= 10);
        return put_row(r, g, first, (size_t)(digits + sizeof digits - first), &t) < 0 ? NULL : p;
    }
    p = skip_value(r, p, &s);
    if (!p) return NULL;
    r->skip_counts[s.kind == V_NULL ? SKIP_NULL : s.kind == V_ARRAY ? SKIP_NESTED : SKIP_NON_TENSOR]++;
    return p;
}

typedef struct {
    Tensor first;
    int found;
} FirstItem;

static const char *first_item(Reader *r, const char *p, Py_ssize_t position, void *context) {
    FirstItem *f = context;
    if (position == 0 && at(r, p, '{')) {
        f->found = 1;
        return read_tensor(r, p, &f->first);
    }
    Span ignored;
    return skip_value(r, p, &ignored);
}

typedef struct {
    const Group *group;
    Span names[32];
    int count;
    PyObject *many; /* names as a set, past 32 */
} Parameters;

static int check_unique(Reader *r, Parameters *ps, const Span *name) {
    if (ps->count < 32) {
        for (int i = 0; i < ps->count; i++) {
            const Span *other = &ps->names[i];
            if (other->end - other->start == name->end - name->start &&
                memcmp(other->start, name->start, (size_t)(name->end - name->start)) == 0)
                return refuse(r, "duplicate parameter name", name->start);
        }
        ps->names[ps->count++] = *name;
        return 0;
    }
    if (!ps->many) {
        ps->many = PySet_New(NULL);
        if (!ps->many) return -1;
        for (int i = 0; i < 32; i++) {
            PyObject *text = PyBytes_FromStringAndSize(ps->names[i].start, ps->names[i].end - ps->names[i].start);
            if (!text || PySet_Add(ps->many, text) < 0) {
                Py_XDECREF(text);
                return -1;
            }
            Py_DECREF(text);
        }
    }
    PyObject *text = PyBytes_FromStringAndSize(name->start, name->end - name->start);
    if (!text) return -1;
    int known = PySet_Contains(ps->many, text);
    if (known == 0) known = PySet_Add(ps->many, text) < 0 ? -1 : 0;
    Py_DECREF(text);
    if (known < 0) return -1;
    return known ? refuse(r, "duplicate parameter name", name->start) : 0;
}

/* One parameter: the object itself when it has a `type`, else item 0 of a list of objects (docs/dump-format.md Q1). */
static const char *parameter_member(Reader *r, const char *p, Span *name, void *context) {
    Parameters *ps = context;
    if (name->escaped) return refuse(r, "escaped parameter name", name->start), NULL;
    if (check_unique(r, ps, name) < 0) return NULL;
    Tensor t;
    int chosen = 0;
    if (at(r, p, '{')) {
        p = read_tensor(r, p, &t);
        chosen = t.type.present;
    } else if (at(r, p, '[')) {
        FirstItem f = {.found = 0};
        p = each_item(r, p, first_item, &f);
        chosen = f.found;
        t = f.first;
    } else {
        Span ignored;
        p = skip_value(r, p, &ignored);
    }
    if (!p) return NULL;
    if (!chosen) {
        r->skip_counts[SKIP_NULL]++;
        return p;
    }
    int skip = tensor_skip(r, &t);
    if (skip == -2) return NULL;
    if (skip >= 0) {
        r->skip_counts[skip]++;
        return p;
    }
    return put_row(r, ps->group, name->start, (size_t)(name->end - name->start), &t) < 0 ? NULL : p;
}

/* The rows of a parameter object at P (on its '{'); returns the position after it. */
static const char *parameter_rows(Reader *r, const char *p, const Group *g) {
    Parameters ps = {.group = g, .count = 0, .many = NULL};
    p = each_member(r, p, parameter_member, &ps);
    Py_XDECREF(ps.many);
    return p;
}


typedef enum { FORWARD, BACKWARD, PARAMETERS_GRAD } Metric;

/* A forward or backward entry, read in one pass: each field that gives rows gives them as it is read.
 * msprobe writes them in the order of docs/dump-format.md §6 (input_args or input, output, parameters); other
 * orders, and repeated fields (whose last value would win), are refused, to keep the rows in that order. */
typedef struct {
    Metric kind;
    Group *group;
    int next_group; /* the first group that may still come */
    Span is_recompute;
} Fields;

/* The group (0 input, 1 output, 2 parameters) of a field of a KIND entry, or -1 for a field without rows. */
static int group_of(Metric kind, const Span *key) {
    switch (key->end - key->start) {
        case 5:
            return kind == BACKWARD && SPAN_IS(key, "input") ? 0 : -1;
        case 6:
            return SPAN_IS(key, "output") ? 1 : -1;
        case 10:
            return kind == FORWARD && SPAN_IS(key, "input_args")   ? 0
                   : kind == FORWARD && SPAN_IS(key, "parameters") ? 2
                                                                   : -1;
        default:
            return -1;
    }
}

static const char *field_member(Reader *r, const char *p, Span *key, void *context) {
    Fields *f = context;
    Span ignored;
    if (key->escaped) return refuse(r, "escaped field name in an entry", key->start), NULL;
    int group = group_of(f->kind, key);
    if (group < 0) return skip_value(r, p, SPAN_IS(key, "is_recompute") ? &f->is_recompute : &ignored);
    if (group < f->next_group) return refuse(r, "entry fields repeated or out of order", key->start), NULL;
    f->next_group = group + 1;
    set_start(f->group, GROUP_STARTS[group]);
    if (group == 2) {
        if (!at(r, p, '{')) return refuse(r, "'parameters' not an object", p), NULL;
        return parameter_rows(r, p, f->group);
    }
    if (!at(r, p, '[')) return refuse(r, "list field not a list", p), NULL;
    return each_item(r, p, slot_item, f->group);
}

/* ---------------------------------------------------------------- keys of `data` */

static PyObject *str_recompute, *str_parameters_grad, *str_backward;

/* The key's rules (cached by the caller across files): a skip reason, or (metric, forward, prefix, index,
 * local micro step). New reference. */
static PyObject *key_rules(Reader *r, PyObject *key) {
    PyObject *info = PyDict_GetItemWithError(r->key_cache, key);
    if (info) {
        Py_INCREF(info);
        return info;
    }
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallOneArg(r->key_info, key);
}

static int count_skip(Reader *r, PyObject *reason) {
    PyObject *count = PyDict_GetItemWithError(r->skipped, reason);
    if (!count && PyErr_Occurred()) return -1;
    PyObject *next = PyLong_FromSsize_t((count ? PyLong_AsSsize_t(count) : 0) + 1);
    if (!next) return -1;
    int failed = PyDict_SetItem(r->skipped, reason, next);
    Py_DECREF(next);
    return failed;
}

/* The rows of one object entry; P is on its '{'. */
static const char *entry_rows(Reader *r, const char *p, PyObject *key, PyObject *info) {
    Span ignored;
    if (PyUnicode_Check(info)) {
        if (count_skip(r, info) < 0) return NULL;
        return skip_value(r, p, &ignored);
    }
    if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 5) {
        PyErr_SetString(PyExc_TypeError, "key_info must give a str or a 5-tuple");
        return NULL;
    }
    PyObject *metric = PyTuple_GET_ITEM(info, 0);
    int forward = PyObject_IsTrue(PyTuple_GET_ITEM(info, 1));
    PyObject *prefix = PyTuple_GET_ITEM(info, 2);
    if (forward < 0) return NULL;
    Group g;
    g.position = (int32_t)PyList_GET_SIZE(r->keys);
    g.prefix = PyUnicode_AsUTF8AndSize(prefix, &g.prefix_len);
    if (!g.prefix) return NULL;
    int kind = PyUnicode_Compare(metric, str_parameters_grad) == 0 ? PARAMETERS_GRAD
               : PyUnicode_Compare(metric, str_backward) == 0     ? BACKWARD
                                                                  : FORWARD;
    if (PyErr_Occurred()) return NULL;
    const char *after;
    if (kind == PARAMETERS_GRAD) {
        set_start(&g, ".");
        after = parameter_rows(r, p, &g);
    } else {
        Fields f = {.kind = kind, .group = &g, .next_group = 0};
        after = each_member(r, p, field_member, &f);
        if (after && kind == FORWARD && forward && f.is_recompute.present) {
            if (f.is_recompute.kind == V_TRUE)
                metric = str_recompute;
            else if (f.is_recompute.kind != V_FALSE && f.is_recompute.kind != V_NULL)
                return refuse(r, "is_recompute neither a bool nor null", f.is_recompute.start), NULL;
        }
    }
    if (!after || PyList_Append(r->keys, key) < 0 || PyList_Append(r->metrics, metric) < 0) return NULL;
    if (PyList_Append(r->indexes, PyTuple_GET_ITEM(info, 3)) < 0 || PyList_Append(r->locals, PyTuple_GET_ITEM(info, 4)) < 0)
        return NULL;
    return after;
}

static const char *data_member(Reader *r, const char *p, Span *k, void *context) {
    if (k->escaped) return refuse(r, "escaped key", k->start), NULL;
    PyObject *key = PyUnicode_FromStringAndSize(k->start, k->end - k->start);
    if (!key) return NULL;
    Py_ssize_t before = PySet_GET_SIZE(r->seen);
    const char *after = NULL;
    if (PySet_Add(r->seen, key) < 0) goto done;
    if (PySet_GET_SIZE(r->seen) == before) {
        refuse(r, "duplicate key", k->start); /* Python keeps the last value at the first position */
        goto done;
    }
    if (!at(r, p, '{')) {
        Span ignored;
        after = skip_value(r, p, &ignored);
        if (after) r->skip_counts[SKIP_NOT_OBJECT]++;
        goto done;
    }
    PyObject *info = key_rules(r, key);
    if (info) {
        after = entry_rows(r, p, key, info);
        Py_DECREF(info);
    }
done:
    Py_DECREF(key);
    return after;
}

typedef struct {
    int data_seen;
} Top;

static const char *top_member(Reader *r, const char *p, Span *key, void *context) {
    Top *top = context;
    if (key->escaped) return refuse(r, "escaped top-level key", key->start), NULL;
    if (!SPAN_IS(key, "data")) {
        Span ignored;
        return skip_value(r, p, &ignored);
    }
    if (top->data_seen) return refuse(r, "duplicate 'data'", key->start), NULL;
    top->data_seen = 1;
    if (!at(r, p, '{')) return refuse(r, "'data' not an object", p), NULL;
    return each_member(r, p, data_member, NULL);
}

static int read_document(Reader *r) {
    const char *p = skip_ws(r->start, r->end);
    if (p >= r->end || *p != '{') return refuse(r, "top level not an object", p);
    Top top = {0};
    p = each_member(r, p, top_member, &top);
    if (!p) return -1;
    if (skip_ws(p, r->end) != r->end) return refuse(r, "extra data after the document", p);
    if (!top.data_seen) return refuse(r, "no 'data'", NULL);
    return 0;
}

/* ---------------------------------------------------------------- the module function */

static const char *const SKIP_NAMES_DOC = "not_object, null, nested, non_tensor, type, dtype";

static PyObject *array_parts(Reader *r) {
    PyObject *stats = PyTuple_New(STATS);
    if (!stats) return NULL;
    for (int i = 0; i < STATS; i++) {
        PyObject *validity = r->nulls[i] ? buf_bytes(&r->validity[i]) : Py_NewRef(Py_None);
        PyObject *pair = validity ? Py_BuildValue("(NN)", buf_bytes(&r->values[i]), validity) : NULL;
        if (!pair) {
            Py_DECREF(stats);
            return NULL;
        }
        PyTuple_SET_ITEM(stats, i, pair);
    }
    return stats;
}

static int add_skip_counts(Reader *r, PyObject *names) {
    for (int code = 0; code < SKIP_CODES; code++) {
        if (!r->skip_counts[code]) continue;
        PyObject *name = PyTuple_GET_ITEM(names, code);
        PyObject *count = PyDict_GetItemWithError(r->skipped, name);
        if (!count && PyErr_Occurred()) return -1;
        PyObject *total = PyLong_FromSsize_t((count ? PyLong_AsSsize_t(count) : 0) + r->skip_counts[code]);
        if (!total || PyDict_SetItem(r->skipped, name, total) < 0) {
            Py_XDECREF(total);
            return -1;
        }
        Py_DECREF(total);
    }
    return 0;
}

static void reader_free(Reader *r) {
    Py_XDECREF(r->keys);
    Py_XDECREF(r->metrics);
    Py_XDECREF(r->indexes);
    Py_XDECREF(r->locals);
    Py_XDECREF(r->seen);
    Py_XDECREF(r->skipped);
    PyMem_Free(r->row_key.data);
    PyMem_Free(r->name_offsets.data);
    PyMem_Free(r->names.data);
    for (int i = 0; i < STATS; i++) {
        PyMem_Free(r->values[i].data);
        PyMem_Free(r->validity[i].data);
    }
}

PyDoc_STRVAR(extract_doc,
             "extract(raw, key_cache, key_info, raw_stat, skip_names, tensor_types, float_dtypes) -> tuple\n\n"
             "The rows of the dump.json bytes RAW. KEY_CACHE maps a key to its rules, KEY_INFO(key) gives\n"
             "them for a key not in it; RAW_STAT(str) is a string statistic's value; SKIP_NAMES names the\n"
             "slot skip reasons (not_object, null, nested, non_tensor, type, dtype); a tensor gives a row\n"
             "when its type is one of TENSOR_TYPES and its dtype one of FLOAT_DTYPES (tuples of str).\n"
             "Returns (keys, metrics, indexes, locals, row_key, name_offsets, names, stats, rows, skipped);\n"
             "stats holds (values, validity or None) per statistic. Raises Refused for input it cannot\n"
             "read exactly.");

static PyObject *extract(PyObject *module, PyObject *args) {
    Py_buffer raw;
    PyObject *key_cache, *key_info, *raw_stat, *skip_names, *tensor_types, *float_dtypes;
    if (!PyArg_ParseTuple(args, "y*O!OOO!O!O!", &raw, &PyDict_Type, &key_cache, &key_info, &raw_stat, &PyTuple_Type,
                          &skip_names, &PyTuple_Type, &tensor_types, &PyTuple_Type, &float_dtypes))
        return NULL;
    Reader r;
    memset(&r, 0, sizeof r);
    if (PyTuple_GET_SIZE(skip_names) != SKIP_CODES) {
        PyErr_Format(PyExc_ValueError, "skip_names needs %d names: %s", SKIP_CODES, SKIP_NAMES_DOC);
        PyBuffer_Release(&raw);
        return NULL;
    }
    if (words_of(tensor_types, &r.tensor_types, "tensor_types") < 0 ||
        words_of(float_dtypes, &r.float_dtypes, "float_dtypes") < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    r.start = raw.buf;
    r.end = r.start + raw.len;
    r.key_cache = key_cache;
    r.key_info = key_info;
    r.raw_stat = raw_stat;
    PyObject *result = NULL;
    r.keys = PyList_New(0);
    r.metrics = PyList_New(0);
    r.indexes = PyList_New(0);
    r.locals = PyList_New(0);
    r.seen = PySet_New(NULL);
    r.skipped = PyDict_New();
    int32_t zero = 0;
    if (!r.keys || !r.metrics || !r.indexes || !r.locals || !r.seen || !r.skipped) goto done;
    if (buf_put(&r.name_offsets, &zero, sizeof zero) < 0) goto done;
    if (read_document(&r) < 0) {
        if (PyErr_Occurred())
            goto done;
        if (r.where)
            PyErr_Format(Refused, "%s at byte %zd", r.why, (Py_ssize_t)(r.where - r.start));
        else
            PyErr_SetString(Refused, r.why);
        goto done;
    }
    if (add_skip_counts(&r, skip_names) < 0) goto done;
    PyObject *stats = array_parts(&r);
    if (!stats) goto done;
    result = Py_BuildValue("(OOOONNNNLO)", r.keys, r.metrics, r.indexes, r.locals, buf_bytes(&r.row_key),
                           buf_bytes(&r.name_offsets), buf_bytes(&r.names), stats, (long long)r.rows, r.skipped);
done:
    reader_free(&r);
    PyBuffer_Release(&raw);
    return result;
}

PyDoc_STRVAR(number_doc,
             "number(token) -> float\n\n"
             "The statistic value of a JSON number token as the reader computes it (for tests).");

static PyObject *number(PyObject *module, PyObject *arg) {
    Py_buffer token;
    if (PyObject_GetBuffer(arg, &token, PyBUF_SIMPLE) < 0) return NULL;
    Reader r;
    memset(&r, 0, sizeof r);
    r.start = token.buf;
    r.end = r.start + token.len;
    Span s;
    const char *after = token.len && (*r.start == '-' || is_digit(*r.start)) ? read_number(&r, r.start, &s) : NULL;
    double value = 0.0;
    PyObject *result = NULL;
    if (!after || after != r.end)
        PyErr_SetString(PyExc_ValueError, "not a JSON number token");
    else if (number_value(&s, &value) == 0)
        result = PyFloat_FromDouble(value);
    PyBuffer_Release(&token);
    return result;
}

static PyMethodDef methods[] = {
    {"extract", extract, METH_VARARGS, extract_doc},
    {"number", number, METH_O, number_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_extract",
                                        "The rows of one dump.json, read in C (see trendconv.formats.dump.parse).", -1,
                                        methods};

PyMODINIT_FUNC PyInit__extract(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Refused = PyErr_NewException("trendconv.formats.dump._extract.Refused", NULL, NULL);
    str_recompute = PyUnicode_InternFromString("recompute");
    str_parameters_grad = PyUnicode_InternFromString("parameters_grad");
    str_backward = PyUnicode_InternFromString("backward");
    if (!Refused || !str_recompute || !str_parameters_grad || !str_backward ||
        PyModule_AddObjectRef(module, "Refused", Refused) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    make_plain_table();
    if (make_pow10_table() < 0) {
        Py_DECREF(module);
        return NULL;
    }
    /* the bits Python's float() gives, so both ways of reading a file write the same shard bytes */
    nan_value = PyOS_string_to_double("nan", NULL, NULL);
    inf_value = PyOS_string_to_double("inf", NULL, NULL);
    if (PyErr_Occurred()) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

/* trendconv_columns: a SQLite extension that reads rows straight out of Arrow column buffers.
 *
 *     INSERT OR IGNORE INTO trend_data SELECT c0, c1, ... FROM trendconv_columns(:spec)
 *
 * inserts every row in order without making a Python value per cell and binding it: that took the load
 * stage about as long as SQLite's own work for the row. :spec is the address of a column description
 * (see Spec) that the caller keeps alive, with the buffers it names, until the statement is done. The
 * table exists only on the connection that loaded the extension: trendconv's private build connection.
 *
 * Columns c0..c31; a column the description does not name is NULL. Integer columns are int64, real ones
 * float64; a column may have an Arrow validity bitmap (a clear bit is NULL). A CLEANED column is float64 read
 * through the value rules (see `cleaned`), here on the writer thread rather than in Arrow on the loader's.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_COLUMNS 32 /* trend_data has at most 4 + 14 (every monitor stat); keep load/connection.py in step */
#define SPEC_MAGIC 0x736e6d756c6f6374LL /* "tcolumns", little-endian */

enum { INT64 = 0, FLOAT64 = 1, CLEANED = 2 };

/* The value rules of docs/dump-format.md §7 steps 3-5, as trendconv.loading.insert.clean_values applies them:
 * ±inf to ±(1e9+1), clipped to ±1e9, NaN to NULL. keep in step with VALUE_LIMIT and INF_VALUE there. */
#define VALUE_LIMIT 1e9
#define INF_VALUE (VALUE_LIMIT + 1)

static void cleaned(sqlite3_context *context, double value) {
    if (isnan(value)) return; /* NULL */
    if (isinf(value))
        value = value > 0 ? INF_VALUE : -INF_VALUE;
    else if (value > VALUE_LIMIT)
        value = VALUE_LIMIT;
    else if (value < -VALUE_LIMIT)
        value = -VALUE_LIMIT;
    sqlite3_result_double(context, value);
}

typedef struct {
    int64_t type;     /* INT64, FLOAT64 or CLEANED */
    int64_t data;     /* address of the values, or 0 for a column of nulls */
    int64_t validity; /* address of the validity bitmap, or 0 */
    int64_t offset;   /* of the first row in both buffers, in rows (an Arrow array's offset) */
} Column;

typedef struct {
    int64_t magic; /* SPEC_MAGIC */
    int64_t rows;
    int64_t columns;
    Column column[MAX_COLUMNS];
} Spec;

typedef struct {
    sqlite3_vtab base;
} Table;

typedef struct {
    sqlite3_vtab_cursor base;
    const Spec *spec;
    int64_t row;
} Cursor;

#define SPEC_COLUMN MAX_COLUMNS /* the hidden argument column */

static int connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **error) {
    char declaration[16 + 5 * MAX_COLUMNS + 16] = "CREATE TABLE x(";
    for (int i = 0; i < MAX_COLUMNS; i++) sprintf(declaration + strlen(declaration), "c%d, ", i);
    strcat(declaration, "spec HIDDEN)");
    int rc = sqlite3_declare_vtab(db, declaration);
    if (rc != SQLITE_OK) return rc;
    Table *table = sqlite3_malloc(sizeof *table);
    if (!table) return SQLITE_NOMEM;
    memset(table, 0, sizeof *table);
    *out = &table->base;
    return SQLITE_OK;
}

static int disconnect(sqlite3_vtab *table) {
    sqlite3_free(table);
    return SQLITE_OK;
}

/* Only `spec = ?` can drive a scan: without it there is nothing to read. */
static int best_index(sqlite3_vtab *table, sqlite3_index_info *info) {
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn == SPEC_COLUMN && c->op == SQLITE_INDEX_CONSTRAINT_EQ && c->usable) {
            info->aConstraintUsage[i].argvIndex = 1;
            info->aConstraintUsage[i].omit = 1;
            info->estimatedCost = 1.0;
            info->estimatedRows = 1000;
            return SQLITE_OK;
        }
    }
    for (int i = 0; i < info->nConstraint; i++)
        if (info->aConstraint[i].iColumn == SPEC_COLUMN) return SQLITE_CONSTRAINT; /* try another plan */
    table->zErrMsg = sqlite3_mprintf("trendconv_columns needs its spec argument");
    return SQLITE_ERROR;
}

static int open_cursor(sqlite3_vtab *table, sqlite3_vtab_cursor **out) {
    Cursor *cursor = sqlite3_malloc(sizeof *cursor);
    if (!cursor) return SQLITE_NOMEM;
    memset(cursor, 0, sizeof *cursor);
    *out = &cursor->base;
    return SQLITE_OK;
}

static int close_cursor(sqlite3_vtab_cursor *cursor) {
    sqlite3_free(cursor);
    return SQLITE_OK;
}

static int filter(sqlite3_vtab_cursor *base, int plan, const char *plan_text, int argc, sqlite3_value **argv) {
    Cursor *cursor = (Cursor *)base;
    const Spec *spec = (const Spec *)(intptr_t)sqlite3_value_int64(argv[0]);
    cursor->row = 0;
    cursor->spec = spec;
    if (!spec || spec->magic != SPEC_MAGIC || spec->rows < 0 || spec->columns < 0 || spec->columns > MAX_COLUMNS) {
        base->pVtab->zErrMsg = sqlite3_mprintf("trendconv_columns: not a column description");
        cursor->spec = NULL;
        return SQLITE_ERROR;
    }
    return SQLITE_OK;
}

static int next(sqlite3_vtab_cursor *base) {
    ((Cursor *)base)->row++;
    return SQLITE_OK;
}

static int eof(sqlite3_vtab_cursor *base) {
    const Cursor *cursor = (const Cursor *)base;
    return !cursor->spec || cursor->row >= cursor->spec->rows;
}

static int column(sqlite3_vtab_cursor *base, sqlite3_context *context, int i) {
    const Cursor *cursor = (const Cursor *)base;
    const Spec *spec = cursor->spec;
    if (i == SPEC_COLUMN) {
        sqlite3_result_int64(context, (sqlite3_int64)(intptr_t)spec);
        return SQLITE_OK;
    }
    if (i >= spec->columns) return SQLITE_OK; /* NULL */
    const Column *c = &spec->column[i];
    if (!c->data) return SQLITE_OK; /* an array of nulls may have no values */
    int64_t at = c->offset + cursor->row;
    if (c->validity) {
        const unsigned char *bits = (const unsigned char *)(intptr_t)c->validity;
        if (!(bits[at >> 3] >> (at & 7) & 1)) return SQLITE_OK; /* NULL */
    }
    if (c->type == INT64)
        sqlite3_result_int64(context, ((const int64_t *)(intptr_t)c->data)[at]);
    else if (c->type == CLEANED)
        cleaned(context, ((const double *)(intptr_t)c->data)[at]);
    else
        sqlite3_result_double(context, ((const double *)(intptr_t)c->data)[at]);
    return SQLITE_OK;
}

static int rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *out) {
    *out = ((const Cursor *)base)->row;
    return SQLITE_OK;
}

static sqlite3_module module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only: no CREATE VIRTUAL TABLE */
    .xConnect = connect,
    .xBestIndex = best_index,
    .xDisconnect = disconnect,
    .xDestroy = disconnect,
    .xOpen = open_cursor,
    .xClose = close_cursor,
    .xFilter = filter,
    .xNext = next,
    .xEof = eof,
    .xColumn = column,
    .xRowid = rowid,
};

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_trendconvcolumns_init(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
    SQLITE_EXTENSION_INIT2(api);
    return sqlite3_create_module(db, "trendconv_columns", &module, NULL);
}

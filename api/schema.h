/*
 * schema: JSON Schema (response_format), JSON mode and tool calls compiled
 * into engine grammars (engine/grammar.h).
 *
 * The schema is JSON by nature and arrives parsed (jansson); it is compiled
 * here, in api/, into the engine's own grammar form, so JSON never enters
 * the engine and the engine's grammar stays one form for every source
 * (schemas, JSON mode, tool calls, later regular expressions).
 *
 * Supported: type (a name or a list of them), properties, required,
 * additionalProperties (false or a schema), items, prefixItems, minItems,
 * maxItems, enum, const, anyOf, oneOf (as anyOf), $ref to a JSON pointer in
 * the same document ("#", "#/$defs/...", recursion included), minLength,
 * maxLength, format date-time / date / uuid. Ignored annotations: title,
 * description, examples, default, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly ($defs and definitions are read through $ref). Any
 * other keyword is an error naming it and its JSON pointer.
 *
 * Output form: members in schema order (required and optional properties
 * as listed in "properties", then required names not listed there); a
 * single optional space after ':' and ',', no other whitespace; numbers
 * with at most 16 integer and 16 fraction digits and a 1-2 digit exponent.
 * With "properties", an absent or true additionalProperties allows no
 * other member; an object schema without "properties" allows any member.
 *
 * Pure functions; any thread.
 */
#ifndef QWEN3D_API_SCHEMA_H
#define QWEN3D_API_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/grammar.h"

#define API_SCHEMA_ERRORS(X)                                                  \
    X(API_SCHEMA_OK, 0, "success")                                            \
    X(API_SCHEMA_EUNSUPPORTED, -1, "unsupported JSON Schema keyword")         \
    X(API_SCHEMA_EINVALID, -2, "invalid JSON Schema")                         \
    X(API_SCHEMA_ETOOBIG, -3, "JSON Schema exceeds a limit")                  \
    X(API_SCHEMA_EEMPTY, -4, "JSON Schema admits no value")                   \
    X(API_SCHEMA_ENOMEM, -5, "out of memory")

enum {
#define API_SCHEMA_ENUM(name, value, msg) name = value,
    API_SCHEMA_ERRORS(API_SCHEMA_ENUM)
#undef API_SCHEMA_ENUM
};

const char *api_schema_strerror(int err);

/* Limits; a schema past one fails with API_SCHEMA_ETOOBIG naming the keyword. */
#define API_SCHEMA_MAX_DEPTH 32        /* subschemas nested in one another */
#define API_SCHEMA_MAX_NODES 4096      /* subschemas compiled, $ref targets counted once */
#define API_SCHEMA_MAX_PROPERTIES 256  /* per object */
#define API_SCHEMA_MAX_ITEMS 1024      /* finite minItems / maxItems, prefixItems */
#define API_SCHEMA_MAX_ENUM 1024       /* enum values */
#define API_SCHEMA_MAX_LITERAL 65536   /* bytes of enum and const values together */
#define API_SCHEMA_MAX_LENGTH 1000000  /* minLength / maxLength */
/* ... and the engine's ENG_GRAMMAR_MAX_STATES automaton states. */

/* What went wrong: the keyword and its JSON pointer (RFC 6901) in the document given. */
typedef struct api_schema_error {
    char keyword[64];   /* e.g. "minimum"; empty when the schema as a whole is at fault */
    char pointer[256];  /* e.g. "/properties/age/minimum"; "" is the root */
    char message[320];  /* one line naming both */
} api_schema_error;

/* Compiles SCHEMA (an object, or true). Returns 0 and *OUT, or an API_SCHEMA_E* code and ERR. */
int api_schema_compile(const json_t *schema, eng_grammar **out, api_schema_error *err);

/* JSON mode (response_format json_object): any JSON object. */
int api_schema_json_object(eng_grammar **out, api_schema_error *err);

/* A function the model may call. */
typedef struct api_tool_spec {
    const char *name;
    const json_t *parameters;  /* its JSON Schema, or NULL for any object */
} api_tool_spec;

typedef enum api_tools_mode {
    API_TOOLS_REQUIRED = 0,  /* only calls ("required", or a named function given alone) */
    API_TOOLS_AUTO = 1,      /* text without "<tool_call>", then optionally the calls */
} api_tools_mode;

/*
 * Qwen3's tool calls: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * where the tags are the tokens OPEN_ID and CLOSE_ID, NAME one of TOOLS and
 * ARGS valid for that tool's parameters; with PARALLEL, one or more calls
 * joined by "\n". Errors point into tools[i].function.parameters.
 */
int api_schema_tools(const api_tool_spec *tools, size_t n, api_tools_mode mode, bool parallel, int32_t open_id,
                     int32_t close_id, eng_grammar **out, api_schema_error *err);

#endif

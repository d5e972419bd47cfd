/* The C API of phi4mm: load a model once, open sessions (conversations) on it, tokenize, and
 * generate with streaming. Every fallible call returns 0 on success and a non-zero status code on
 * failure, with a malloc'ed message in *error (free it with phi4mm_free). Nothing here prints or
 * exits. A model may be shared by many sessions; one session is used by one thread at a time. */
#ifndef PHI4MM_C_H_
#define PHI4MM_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phi4mm_model phi4mm_model;
typedef struct phi4mm_session phi4mm_session;

typedef struct phi4mm_generate_params {
  int64_t max_new_tokens;   /* <= 0 means 512 */
  float temperature;        /* 0 = greedy */
  int32_t top_k;            /* 0 = off */
  float top_p;              /* 1 = off (0 is read as 1) */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off (0 is read as 1) */
  uint64_t seed;
} phi4mm_generate_params;

/* Receives answer text as it is produced; return 0 to stop generating. */
typedef int (*phi4mm_text_callback)(const char* text, size_t len, void* user_data);

void phi4mm_default_params(phi4mm_generate_params* params);

int phi4mm_model_load(const char* dir, int num_threads, phi4mm_model** out_model, char** error);
void phi4mm_model_free(phi4mm_model* model);

/* ids: malloc'ed array of *n_ids token ids (free with phi4mm_free). */
int phi4mm_tokenize(const phi4mm_model* model, const char* text, int32_t** ids, size_t* n_ids, char** error);

/* A conversation; system_prompt may be NULL. */
int phi4mm_session_new(const phi4mm_model* model, const char* system_prompt, phi4mm_session** out_session,
                       char** error);
void phi4mm_session_free(phi4mm_session* session);

/* Adds a user turn and generates the answer; *out_text (may be NULL) gets the whole answer. */
int phi4mm_session_send(phi4mm_session* session, const char* user_text, const phi4mm_generate_params* params,
                        phi4mm_text_callback callback, void* user_data, char** out_text, char** error);

/* The same, with the answer constrained to JSON: json_schema is a JSON Schema (text) the answer
 * validates against (strict: objects hold only the listed properties unless additionalProperties
 * says more), or NULL for any JSON object. A schema the grammar engine cannot honour is an error
 * naming the JSON pointer of the offending part; nothing is generated then. */
int phi4mm_session_send_json(phi4mm_session* session, const char* user_text, const phi4mm_generate_params* params,
                             const char* json_schema, phi4mm_text_callback callback, void* user_data,
                             char** out_text, char** error);

void phi4mm_free(void* p);

#ifdef __cplusplus
}
#endif

#endif /* PHI4MM_C_H_ */

/* A C user of the installed library: loads the model folder given as argv[1], tokenizes a text,
 * and answers one chat turn greedily (6 tokens), printing the ids and the answer; a bad folder
 * comes back as an error message. Exit 0 only when all of that worked. */
#include <stdio.h>
#include <string.h>

#include "phi4mm/capi/phi4mm_c.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  phi4mm_model* model = NULL;
  char* error = NULL;
  if (phi4mm_model_load("/nonexistent/phi4mm-model", 1, &model, &error) == 0 || error == NULL) return 1;
  printf("bad folder: %s\n", error);
  phi4mm_free(error);
  error = NULL;
  if (phi4mm_model_load(argv[1], 2, &model, &error) != 0) {
    fprintf(stderr, "load: %s\n", error);
    return 1;
  }
  int32_t* ids = NULL;
  size_t n = 0;
  if (phi4mm_tokenize(model, "hello world", &ids, &n, &error) != 0) return 1;
  printf("ids:");
  for (size_t i = 0; i < n; ++i) printf(" %d", ids[i]);
  printf("\n");
  phi4mm_free(ids);
  phi4mm_session* session = NULL;
  if (phi4mm_session_new(model, NULL, &session, &error) != 0) return 1;
  phi4mm_generate_params params;
  phi4mm_default_params(&params);
  params.max_new_tokens = 6;
  char* text = NULL;
  if (phi4mm_session_send(session, "hello", &params, NULL, NULL, &text, &error) != 0) {
    fprintf(stderr, "send: %s\n", error);
    return 1;
  }
  printf("answer: %s\n", text);
  phi4mm_free(text);
  phi4mm_session_free(session);
  phi4mm_model_free(model);
  return 0;
}

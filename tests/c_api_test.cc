// The C API end to end on the tiny fixture: load, tokenize, a two-turn conversation with a
// streaming callback, cancellation from the callback, and errors returned (never printed).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "phi4mm/capi/phi4mm_c.h"
#include "test_util.h"

namespace {

int Collect(const char* text, size_t len, void* user) {
  static_cast<std::string*>(user)->append(text, len);
  return 1;
}

int StopAtOnce(const char*, size_t, void*) { return 0; }

TEST(CApi, LoadTokenizeAndChat) {
  phi4mm_model* model = nullptr;
  char* error = nullptr;
  ASSERT_EQ(phi4mm_model_load(phi4mm::test::FixturePath("tiny/orig").c_str(), 2, &model, &error), 0) << error;
  int32_t* ids = nullptr;
  size_t n = 0;
  ASSERT_EQ(phi4mm_tokenize(model, "hello world", &ids, &n, &error), 0);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(ids[0], 24912);
  EXPECT_EQ(ids[1], 2375);
  phi4mm_free(ids);

  phi4mm_session* session = nullptr;
  ASSERT_EQ(phi4mm_session_new(model, "Be brief.", &session, &error), 0);
  phi4mm_generate_params params;
  phi4mm_default_params(&params);
  params.max_new_tokens = 5;
  for (const char* turn : {"Hello", "And again"}) {
    std::string streamed;
    char* text = nullptr;
    ASSERT_EQ(phi4mm_session_send(session, turn, &params, Collect, &streamed, &text, &error), 0) << error;
    ASSERT_NE(text, nullptr);
    EXPECT_EQ(streamed, std::string(text));
    phi4mm_free(text);
  }
  char* text = nullptr;
  ASSERT_EQ(phi4mm_session_send(session, "Stop me", &params, StopAtOnce, nullptr, &text, &error), 0);
  phi4mm_free(text);
  phi4mm_session_free(session);
  phi4mm_model_free(model);
}

TEST(CApi, ErrorsComeBackAsMessages) {
  phi4mm_model* model = nullptr;
  char* error = nullptr;
  EXPECT_NE(phi4mm_model_load("/nonexistent/phi4mm-model", 1, &model, &error), 0);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("/nonexistent/phi4mm-model"), std::string::npos) << error;
  phi4mm_free(error);
  EXPECT_EQ(model, nullptr);
  error = nullptr;
  EXPECT_NE(phi4mm_model_load(nullptr, 1, &model, &error), 0);
  phi4mm_free(error);
}

TEST(CApi, BadSamplingParamsAreAnError) {
  phi4mm_model* model = nullptr;
  char* error = nullptr;
  ASSERT_EQ(phi4mm_model_load(phi4mm::test::FixturePath("tiny/orig").c_str(), 1, &model, &error), 0);
  phi4mm_session* session = nullptr;
  ASSERT_EQ(phi4mm_session_new(model, nullptr, &session, &error), 0);
  phi4mm_generate_params params;
  phi4mm_default_params(&params);
  params.temperature = -1.0f;
  char* text = nullptr;
  EXPECT_NE(phi4mm_session_send(session, "hi", &params, nullptr, nullptr, &text, &error), 0);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("temperature"), std::string::npos);
  EXPECT_EQ(text, nullptr);
  phi4mm_free(error);
  phi4mm_session_free(session);
  phi4mm_model_free(model);
}

}  // namespace

TEST(CApi, JsonAnswersFollowTheSchemaAndABadSchemaIsAnError) {
  phi4mm_model* model = nullptr;
  char* error = nullptr;
  ASSERT_EQ(phi4mm_model_load(phi4mm::test::FixturePath("trained/orig").c_str(), 1, &model, &error), 0) << error;
  phi4mm_session* session = nullptr;
  ASSERT_EQ(phi4mm_session_new(model, nullptr, &session, &error), 0);
  phi4mm_generate_params params;
  phi4mm_default_params(&params);
  params.temperature = 1.0f;
  params.seed = 7;
  params.max_new_tokens = 80;
  char* text = nullptr;
  const char* schema = R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2]}},
                           "required": ["ok", "n"], "additionalProperties": false})";
  ASSERT_EQ(phi4mm_session_send_json(session, "Answer in JSON.", &params, schema, nullptr, nullptr, &text, &error), 0)
      << error;
  const nlohmann::json v = nlohmann::json::parse(text);
  EXPECT_TRUE(v.at("ok").is_boolean());
  EXPECT_TRUE(v.at("n") == 1 || v.at("n") == 2);
  phi4mm_free(text);
  text = nullptr;
  EXPECT_NE(phi4mm_session_send_json(session, "Again.", &params, R"({"not": {}})", nullptr, nullptr, &text, &error), 0);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("#/not"), std::string::npos) << error;
  EXPECT_EQ(text, nullptr);
  phi4mm_free(error);
  phi4mm_session_free(session);
  phi4mm_model_free(model);
}

//! Chat prompts rendered with the model's own Jinja template.
//!
//! llama.cpp's built-in `apply_chat_template` recognises templates by pattern and, for
//! SmolLM2, drops the default system prompt that the GGUF's Jinja template inserts; a real
//! Jinja engine renders the template as its authors wrote it.

use minijinja::{context, Environment, Error, ErrorKind};

use rillm_backend::ChatMessage;

/// A compiled chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).finish()
    }
}

const NAME: &str = "chat";

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, Error> {
        let mut env = Environment::new();
        // HF templates call Python string methods (`.strip()`, `.startswith()`).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned(NAME, source.to_owned())?;
        Ok(Self { env, bos_token: bos_token.to_owned(), eos_token: eos_token.to_owned() })
    }

    /// Renders the conversation and opens the assistant's turn.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, Error> {
        let template = self.env.get_template(NAME)?;
        template.render(context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_default_system_prompt() {
        let t = ChatTemplate::new(CHATML, "<|im_start|>", "<|im_end|>").unwrap();
        let out = t.render(&[ChatMessage::new("user", "Hi")]).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let src = "{% if messages[0].content.strip() == '' %}{{ raise_exception('empty') }}{% endif %}{{ messages[0].content.upper() }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&[ChatMessage::new("user", " hi ")]).unwrap(), " HI ");
        let err = t.render(&[ChatMessage::new("user", "  ")]).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}

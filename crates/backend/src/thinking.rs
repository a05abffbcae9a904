//! What a chat template does with a reasoning model's thinking, read from its source once.

/// A template that writes `<think>` … `</think>` (Qwen3's, DeepSeek-R1's and their
/// fine-tunes'), and the variable that switches thinking off, if it reads one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateThinking {
    /// `enable_thinking` (Qwen3, SmolLM3) or `thinking` (DeepSeek-V3.1, GLM): false turns
    /// thinking off, the template writing an empty thought itself.
    pub switch: Option<&'static str>,
}

impl TemplateThinking {
    /// `None` for a template that never mentions the markers.
    pub fn read(source: &str) -> Option<Self> {
        if !source.contains("<think>") && !source.contains("</think>") {
            return None;
        }
        let switch = if source.contains("enable_thinking") {
            Some("enable_thinking")
        } else if ["thinking is defined", "if thinking", "not thinking"].iter().any(|s| source.contains(s)) {
            Some("thinking")
        } else {
            None
        };
        Some(Self { switch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_read_for_their_markers_and_switch() {
        let qwen3 =
            "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}";
        assert_eq!(TemplateThinking::read(qwen3), Some(TemplateThinking { switch: Some("enable_thinking") }));
        let r1 = "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
        assert_eq!(TemplateThinking::read(r1), Some(TemplateThinking { switch: None }));
        let v31 = "{% if thinking is defined and thinking %}{{'<think>'}}{% else %}{{'</think>'}}{% endif %}";
        assert_eq!(TemplateThinking::read(v31), Some(TemplateThinking { switch: Some("thinking") }));
        assert_eq!(TemplateThinking::read("{{ '<|im_start|>assistant\\n' }}"), None);
    }
}

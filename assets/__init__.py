"""The files specdec ships: the draft head distilled from the embedded verifier (smollm2-135m-draft/, with
its model card) and the prompt sets (prompts/). Installed as the package data `specdec_core.assets`, so a
wheel carries them; code finds them with `specdec_core.loading.resources.assets_dir()`."""

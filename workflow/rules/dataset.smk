rule prepare_dataset:
    input:
        model=rules.prepare_model.output.model,
        data=dataset_files(),
    output:
        train=result("dataset/train.parquet"),
        validation=result("dataset/validation.parquet"),
        train_examples=result("dataset/train_examples.jsonl"),
        validation_examples=result("dataset/validation_examples.jsonl"),
        tokenizer=result("dataset/tokenizer.json"),
        manifest=result("dataset/manifest.json"),
    log:
        result("logs/prepare_dataset.log"),
    conda:
        "../../envs/train.yaml"
    params:
        settings=plain(SETTINGS.dataset),
        # Named in the dataset stage's errors (e.g. a tokenizer larger than dataset.vocab_size).
        profile_file=profile_file_setting("dataset.vocab_size"),
    script:
        "../scripts/prepare_dataset.py"

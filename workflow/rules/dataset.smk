rule prepare_dataset:
    input:
        model="results/{profile}/{machine}/model/model.json",
        data=dataset_files(),
    output:
        train="results/{profile}/{machine}/dataset/train.parquet",
        validation="results/{profile}/{machine}/dataset/validation.parquet",
        train_examples="results/{profile}/{machine}/dataset/train_examples.jsonl",
        validation_examples="results/{profile}/{machine}/dataset/validation_examples.jsonl",
        tokenizer="results/{profile}/{machine}/dataset/tokenizer.json",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
    params:
        settings=PROFILE["dataset"],
        evaluation=PROFILE.get("evaluation", {}),
        repo=str(REPO),
    log:
        "results/{profile}/{machine}/logs/prepare_dataset.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/prepare_dataset.py"

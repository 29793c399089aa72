#!/usr/bin/python3
"""The tagger's simplest baselines on a TSV dataset (token<TAB>tag, blank
line between sentences): the validation token accuracy of the most frequent
training tag, and of each word's most frequent training tag (the most
frequent tag for words not seen in training).

Usage: tag_baseline.py TRAIN.tsv VAL.tsv   (the default data's files are
under ~/.cache/gocurrent/gotags-v1-*-{train,val}.tsv). Prints one JSON line.
"""
import collections, json, sys

per_word = collections.defaultdict(collections.Counter)
tags = collections.Counter()
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    if line:
        word, tag = line.split("\t")
        per_word[word][tag] += 1
        tags[tag] += 1
majority = tags.most_common(1)[0][0]
n = right_word = right_majority = 0
for line in open(sys.argv[2], encoding="utf-8"):
    line = line.rstrip("\n")
    if line:
        word, tag = line.split("\t")
        n += 1
        guess = per_word[word].most_common(1)[0][0] if word in per_word else majority
        right_word += guess == tag
        right_majority += majority == tag
print(json.dumps({"tokens": n, "majority_tag": majority, "majority_accuracy": right_majority / n,
                  "word_majority_accuracy": right_word / n}))

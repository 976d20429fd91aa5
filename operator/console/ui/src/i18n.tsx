// English and Chinese message catalogs (src/locales/*.json, flat keys; a test fails when a key
// is in one and not the other). The choice is kept in localStorage `rustqueue-language`.

import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react';
import en from './locales/en.json';
import zh from './locales/zh.json';

export const CATALOGS = { en, zh } as const;
export type Language = keyof typeof CATALOGS;
export type MessageKey = keyof typeof en;

const STORAGE_KEY = 'rustqueue-language';

function initialLanguage(): Language {
  const stored = typeof localStorage === 'undefined' ? null : localStorage.getItem(STORAGE_KEY);
  return stored === 'zh' || stored === 'en' ? stored : 'en';
}

/** `{name}` placeholders filled from `vars`. */
export function translate(
  lang: Language,
  key: MessageKey,
  vars?: Record<string, string | number>,
): string {
  const catalog: Record<string, string> = CATALOGS[lang];
  const text = catalog[key] ?? en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (m, name: string) =>
    vars && name in vars ? String(vars[name]) : m,
  );
}

interface I18n {
  lang: Language;
  locale: string;
  setLang: (l: Language) => void;
  t: (key: MessageKey, vars?: Record<string, string | number>) => string;
}

const Ctx = createContext<I18n | null>(null);

export function I18nProvider({ children }: { children: ReactNode }) {
  const [lang, setLangState] = useState<Language>(initialLanguage);
  const setLang = useCallback((l: Language) => {
    localStorage.setItem(STORAGE_KEY, l);
    document.documentElement.lang = l === 'zh' ? 'zh-CN' : 'en';
    setLangState(l);
  }, []);
  const value = useMemo<I18n>(
    () => ({
      lang,
      locale: lang === 'zh' ? 'zh-CN' : 'en',
      setLang,
      t: (key, vars) => translate(lang, key, vars),
    }),
    [lang, setLang],
  );
  return <Ctx.Provider value={value}>{children}</Ctx.Provider>;
}

export function useI18n(): I18n {
  const v = useContext(Ctx);
  if (!v) throw new Error('useI18n outside I18nProvider');
  return v;
}
